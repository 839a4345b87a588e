"""Fixed: the reading stream is taken before the region and recorded, so the block waits for its read."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    host = torch.ones(1 << 22).pin_memory()
    reader = torch.cuda.current_stream()
    side.wait_stream(reader)
    with torch.cuda.stream(side):
        batch = host.to("cuda", non_blocking=True)
        batch.record_stream(reader)
    reader.wait_stream(side)
    total = batch.sum()
    del batch
    with torch.cuda.stream(side):
        reused = torch.zeros(1 << 23, device="cuda")
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
