"""Racy: a side stream that never waits for the current stream overwrites a tensor the current stream still reads.

`copy_back` uploads updated values into the caller's device tensor on its copy stream, as an optimizer that keeps
its master weights on the host does (Megatron's hybrid optimizer, which makes its stream wait first). Nothing makes
the copy stream wait for the current stream, so the upload can land while the matmul launched just before still
reads the old values. The scanner reports the overwrite on the stream nothing ever makes wait (SC106 WAR); streamcheck
reports the write not ordered after the read (SC201 WAR).
"""

import torch


def copy_back(gpu_param: torch.Tensor, host_param: torch.Tensor, copy_stream: torch.cuda.Stream) -> None:
    with torch.cuda.stream(copy_stream):  # streamcheck: switch
        gpu_param.copy_(host_param, non_blocking=True)  # streamcheck: race (the matmul may still read it)


def main() -> None:
    if not torch.cuda.is_available():
        print("side_stream_overwrites_input/racy.py needs a CUDA device; nothing to do")
        return
    copy_stream = torch.cuda.Stream()
    host_param = torch.zeros(2048, 2048, pin_memory=True)
    with torch.cuda.stream(copy_stream):  # the first values come from the copy stream too: the only race is the read
        gpu_param = torch.randn(2048, 2048, device="cuda")
    torch.cuda.current_stream().wait_stream(copy_stream)
    gpu_param.record_stream(torch.cuda.current_stream())
    out = gpu_param @ gpu_param  # streamcheck: earlier (the current stream reads the old values)
    copy_back(gpu_param, host_param, copy_stream)
    torch.cuda.current_stream().wait_stream(copy_stream)
    print(f"racy: {out.abs().sum().item():.0f}")


if __name__ == "__main__":
    main()
