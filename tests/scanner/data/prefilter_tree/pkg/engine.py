import torch

from . import helpers

side = torch.cuda.Stream()


def step(x, y):
    x.copy_(y)
    with torch.cuda.stream(side):
        y.add_(x)
    print(helpers.describe(y))
