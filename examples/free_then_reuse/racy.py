"""Scenario 21, racy, the classic prefetcher: batches are copied to the GPU on a copy stream, so their blocks belong
to the copy stream's pool; each is read on the default stream and freed without `record_stream`, and the copy
stream's next prefetch can be handed the same block while the default stream still reads it.

streamcheck reports it at the copy stream's next work (where the block can be reused), with the free and the read
as related locations: twice, once per freed batch."""

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
        total += batch.sum()  # streamcheck: earlier
        del batch  # streamcheck: race (back to the copy stream's pool while the default stream may still read it)
        with torch.cuda.stream(copy_stream):
            upcoming = host[i].to("cuda", non_blocking=True)  # streamcheck: reuse (the copy stream's next work)
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
