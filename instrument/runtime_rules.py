"""The runtime detector's rules, SC201-SC204: which race kind each reports and its documentation (the catalogue's
entries; streamcheck/catalogue.py). Torch-free: `streamcheck explain`, the docs and the reports read it.
"""

from __future__ import annotations

from streamcheck.catalogue import RUNTIME, RuleInfo, documentation, entry

# The detector's race kinds (instrument/detector.py race_kind) -> the rule that reports them.
RULE_OF_KIND = {"RAW": "SC201", "WAR": "SC201", "WAW": "SC201", "FREE": "SC202", "HOST": "SC203", "PEER": "SC204"}


def _rule(rule_id: str, name: str, summary: str, what: str, why: str, example: str, fix: str) -> RuleInfo:
    sections = [("What it does", what), ("Why it is bad", why), ("Example", example), ("Fix", fix)]
    return entry(rule_id, summary, documentation(rule_id, summary, sections), RUNTIME, name)


RUNTIME_RULES = {info.id: info for info in (
    _rule(
        "SC201", "StreamRaceAtRuntime", "race between streams (RAW, WAR, WAW), seen at runtime",
        "Reports two accesses that device streams (an NCCL stream included) made to the same bytes during a run,\n"
        "at least one a write, with nothing ordering them: no wait_stream, no event waited on, no synchronize,\n"
        "no work.wait(). Reported whether or not the data was corrupted in this run.",
        "Streams run independently; which kernel runs first depends on timing. The later access reads stale or\n"
        "half-written data (or its write is overwritten) only under some timings, so the result is silently\n"
        "wrong at scale and fine in a small test. DeepSpeed 0.13.4's hpZ NaN was this race.",
        "sec.copy_(src)                                   # compute stream\n"
        "with torch.cuda.stream(side):\n"
        "    dist.all_gather_into_tensor(out, sec)         # NCCL waits for `side` only",
        "Make the later stream wait for the earlier one between the two accesses:\n"
        "`side.wait_stream(torch.cuda.current_stream())` before the `with` (or an event recorded after the\n"
        "write and `side.wait_event(event)`)."),
    _rule(
        "SC202", "FreeWithoutRecordStreamAtRuntime",
        "tensor freed while another stream may still use it (missing record_stream)",
        "Reports a tensor released to the caching allocator while a stream other than its allocation stream\n"
        "may still be using it: that stream used it and was neither given to record_stream nor waited for.\n"
        "It is reported where the hazard gets real: at the allocation stream's next work (which may be handed\n"
        "the block), with the free and the other stream's access as related locations. Free -> synchronize\n"
        "(or a wait for the other stream) -> reuse is not reported.",
        "The caching allocator hands a freed block out again as soon as its allocation stream is done with it;\n"
        "work queued on other streams is not waited for, so it may read or write memory that now belongs to\n"
        "another tensor, whether or not the block was reused in this run.",
        "t = torch.empty(n, device='cuda')               # allocated on the compute stream\n"
        "with torch.cuda.stream(side):\n"
        "    y = t * 2\n"
        "del t                                            # side may still be reading t",
        "`t.record_stream(side)` before the free, for every other stream that used t; or make the allocation\n"
        "stream wait for `side` before the free."),
    _rule(
        "SC203", "HostDeviceRaceAtRuntime", "host and device race on memory, seen at runtime",
        "Reports the host reading or writing memory (usually a pinned buffer of a non_blocking copy) that a\n"
        "stream was still reading or writing, with no synchronize in between.",
        "A non_blocking copy returns before the copy ran: the host sees old bytes (device-to-host) or changes\n"
        "the source before the device read it (host-to-device).",
        "h.copy_(d, non_blocking=True)                    # h pinned; the copy is only queued\n"
        "print(h.tolist())                                # may print old data",
        "`torch.cuda.current_stream().synchronize()`, or `event.synchronize()` on an event recorded after the\n"
        "copy, before the host access."),
    _rule(
        "SC204", "SharedMemoryHandedOverEarlyAtRuntime",
        "memory other processes read handed over while a stream still writes it, seen at runtime",
        "Reports a device write to memory that other processes read (a tensor exported for CUDA IPC with\n"
        "`reduce_tensor`, or passed to `symm_mem.rendezvous`) that had not finished when the host handed the\n"
        "memory over: a host barrier (`dist.barrier`, `monitored_barrier`), an object collective that carries\n"
        "the handles (`all_gather_object`, `broadcast_object_list`, ...), or a `multiprocessing` queue put or\n"
        "pipe send. The peers' reads are ordered after the host's own present (what it synchronized with) and,\n"
        "for an IPC export, after the current stream's work at the first export (torch records an event there\n"
        "and the importer waits for it), and after nothing else. A barrier over an NCCL group orders the\n"
        "current stream's work before it. The static twin is SC107.",
        "A host barrier or a queue message says only that the producer *queued* its writes. The other process\n"
        "maps the memory and reads it at once, while the write may still wait behind earlier kernels: it sees\n"
        "the old bytes, under some timings only.",
        "rebuild, args = reduce_tensor(buf)              # torch records the export's event now\n"
        "buf.fill_(1.0)                                   # queued after the event\n"
        "queue.put((rebuild, args))                       # the consumer may read zeros",
        "Synchronize between the last write and the hand-over: `torch.cuda.synchronize()` (or the writing\n"
        "stream's `synchronize()`, or an event recorded after the write and `event.synchronize()`)."),
)}


def catalogue_entries() -> list[RuleInfo]:
    return list(RUNTIME_RULES.values())
