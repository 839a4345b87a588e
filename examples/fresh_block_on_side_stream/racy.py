"""Racy: a side stream fills a block the current stream has just allocated, before waiting for it.

`reload` allocates the buffer on the current stream and fills it on the copy stream. The caching allocator may hand
out a block freed a moment ago (here `activation`, whose last reader is still queued on the current stream), so the
upload can overwrite memory that reader still uses: DeepSpeed's optimizer-state reload waits for the compute stream
for exactly this reason ("seen as NaN losses"). The scanner reports the write (SC106 WAR). The runtime detector
starts a fresh history at each allocation, so it does not see the earlier tenant; it sees the same missing wait as
the copy's write not ordered after the allocation's own write on the current stream (SC201 WAW).
"""

import torch


def reload(host_saved: torch.Tensor, copy_stream: torch.cuda.Stream) -> torch.Tensor:
    buf = torch.empty_like(host_saved, device="cuda")  # streamcheck: earlier (a block of the current stream's pool)
    with torch.cuda.stream(copy_stream):
        buf.copy_(host_saved, non_blocking=True)  # streamcheck: race (the block's last tenant may still be read)
    buf.record_stream(copy_stream)
    torch.cuda.current_stream().wait_stream(copy_stream)
    return buf


def main() -> None:
    if not torch.cuda.is_available():
        print("fresh_block_on_side_stream/racy.py needs a CUDA device; nothing to do")
        return
    copy_stream = torch.cuda.Stream()
    host_saved = torch.ones(2048, 2048, pin_memory=True)
    activation = torch.randn(2048, 2048, device="cuda")
    out = activation @ activation  # the block's last reader, still queued
    del activation
    restored = reload(host_saved, copy_stream)
    print(f"racy: {out.abs().sum().item():.0f} {restored.sum().item():.0f}")


if __name__ == "__main__":
    main()
