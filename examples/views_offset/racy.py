"""Scenario 20, racy: two streams write neighbouring slices of one flat buffer, and the slices overlap by one element.

Flat buffers (DeepSpeed's contiguous gradients, ZeRO partitions) are views into one storage: a detector that keys
on the storage alone either reports every pair of slices or none. The second slice starts at N - 1, not N.
"""

import torch

N = 1 << 20


def main() -> None:
    buf = torch.zeros(2 * N, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        buf[0:N].fill_(1.0)  # streamcheck: earlier
    with torch.cuda.stream(s2):
        buf[N - 1 : 2 * N].fill_(2.0)  # streamcheck: race (element N - 1 is also written on s1)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
