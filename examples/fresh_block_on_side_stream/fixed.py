"""Fixed: the copy stream waits for the current stream, which allocated the buffer, before it fills it."""

import torch


def reload(host_saved: torch.Tensor, copy_stream: torch.cuda.Stream) -> torch.Tensor:
    buf = torch.empty_like(host_saved, device="cuda")
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        buf.copy_(host_saved, non_blocking=True)
    buf.record_stream(copy_stream)
    torch.cuda.current_stream().wait_stream(copy_stream)
    return buf


def main() -> None:
    if not torch.cuda.is_available():
        print("fresh_block_on_side_stream/fixed.py needs a CUDA device; nothing to do")
        return
    copy_stream = torch.cuda.Stream()
    host_saved = torch.ones(2048, 2048, pin_memory=True)
    activation = torch.randn(2048, 2048, device="cuda")
    out = activation @ activation
    del activation
    restored = reload(host_saved, copy_stream)
    print(f"fixed: {out.abs().sum().item():.0f} {restored.sum().item():.0f}")


if __name__ == "__main__":
    main()
