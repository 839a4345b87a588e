"""Scenario 20, fixed: the two streams write disjoint slices of one flat buffer, so they need no ordering."""

import torch

N = 1 << 20


def main() -> None:
    buf = torch.zeros(2 * N, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        buf[0:N].fill_(1.0)
    with torch.cuda.stream(s2):
        buf[N : 2 * N].fill_(2.0)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
