"""Fixed: record_stream(current) keeps the side stream's block out of its pool until the current stream's read ran."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        batch = torch.cat([x, x])
    torch.cuda.current_stream().wait_stream(side)
    batch.record_stream(torch.cuda.current_stream())
    total = batch.sum()
    del batch
    with torch.cuda.stream(side):
        reused = torch.zeros(1 << 23, device="cuda")
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
