"""Scenario 21, fixed: record_stream tells the allocator that the side stream uses the block before it is freed."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    t1 = torch.ones(1 << 20, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = t1.sum()
    t1.record_stream(side)
    del t1
    reused = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
