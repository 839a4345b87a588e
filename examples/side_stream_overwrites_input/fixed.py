"""Fixed: the copy stream waits for the current stream before it overwrites the tensor."""

import torch


def copy_back(gpu_param: torch.Tensor, host_param: torch.Tensor, copy_stream: torch.cuda.Stream) -> None:
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        gpu_param.copy_(host_param, non_blocking=True)


def main() -> None:
    if not torch.cuda.is_available():
        print("side_stream_overwrites_input/fixed.py needs a CUDA device; nothing to do")
        return
    copy_stream = torch.cuda.Stream()
    host_param = torch.zeros(2048, 2048, pin_memory=True)
    with torch.cuda.stream(copy_stream):  # the first values come from the copy stream too: the only race is the read
        gpu_param = torch.randn(2048, 2048, device="cuda")
    torch.cuda.current_stream().wait_stream(copy_stream)
    gpu_param.record_stream(torch.cuda.current_stream())
    out = gpu_param @ gpu_param
    copy_back(gpu_param, host_param, copy_stream)
    torch.cuda.current_stream().wait_stream(copy_stream)
    print(f"fixed: {out.abs().sum().item():.0f}")


if __name__ == "__main__":
    main()
