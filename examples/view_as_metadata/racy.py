"""Scenario 33, racy: a side stream writes `z`; the default stream, which never waited, takes only metadata of `z`
(view_as, expand_as, reshape_as, type_as, empty_like, new_zeros, size, `x.data = y.view_as(z)`: no data of `z`
is read), then really reads `z`'s data: that last read alone races with the write."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    z = torch.empty(1024, 1024, device="cuda")
    row = torch.ones(1, 1024, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        z.fill_(2.0)  # streamcheck: earlier
    y = x.view_as(z)
    wide = row.expand_as(z)
    shaped = x.reshape_as(z)
    same = y.type_as(z)
    fresh = torch.empty_like(z)
    zeros = z.new_zeros(8)
    x.data = x.data.view_as(z)
    rows, cols = z.size()
    total = (y + wide + shaped + same).sum() + fresh.numel() + zeros.sum() + rows * cols
    total = total + z.sum()  # streamcheck: race (z's data, not waited for)
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
