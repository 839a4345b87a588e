import torch


def where(t):
    return f"{torch.cuda.current_stream()} holds {t.shape}"  # an f-string's braces are code
