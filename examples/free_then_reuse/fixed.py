"""Scenario 21, fixed: the same prefetcher, with free -> synchronize -> reuse: when the copy stream gets its next
work the host has seen the default stream finish, so no reuse can overlap the read (a
`copy_stream.wait_stream(torch.cuda.current_stream())` before the prefetch, or `batch.record_stream(...)` before
the free, would do too, without blocking the host)."""

import torch


def main() -> None:
    copy_stream = torch.cuda.Stream()
    host = [torch.full((1 << 20,), float(i)).pin_memory() for i in range(3)]
    total = torch.zeros((), device="cuda")
    with torch.cuda.stream(copy_stream):
        upcoming = host[0].to("cuda", non_blocking=True)
    for i in range(1, 3):
        torch.cuda.current_stream().wait_stream(copy_stream)
        batch, upcoming = upcoming, None
        total += batch.sum()
        del batch
        torch.cuda.synchronize()
        with torch.cuda.stream(copy_stream):
            upcoming = host[i].to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
