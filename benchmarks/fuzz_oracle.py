"""The long differential fuzz: the online vector-clock Detector against the networkx happens-before oracle (hb.py).

    python benchmarks/fuzz_oracle.py [--programs 10000] [--seed 0] [--max-events 40] [--out DIR]

Random programs of the same shape as tests/instrument/test_property_oracle.py (2 host threads, 2 streams of device 0
and one of device 1, one NCCL comm, 2 events, 2 work handles, 2 storages of 8 bytes; kernels weighted up, event
record/wait also as an adjacent pair, syncs, thread start/join, alloc/record_stream/free, sync and async
collectives, work waits), drawn with Python's `random` from a seed so a run is reproducible and needs no
hypothesis. Each program is replayed into both; their races are compared in canonical form (kind, storage, byte
range, both accesses' seq / write / actor). CI runs the hypothesis property test at a size that takes about a
minute; this is the long run. It prints the number of programs, how many raced, the races compared, the
disagreements and the time; each disagreeing program is written to --out as a trace `streamcheck analyze` can
replay. Exit 1 if any disagreed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamcheck.instrument.offline.hb import HappensBefore  # noqa: E402
from streamcheck.instrument.detector import Detector  # noqa: E402
from streamcheck.instrument.trace import FORMAT, VERSION, replay  # noqa: E402

THREADS = ["T0", "T1"]
STREAMS = ["cuda:0/s0", "cuda:0/s1", "cuda:1/s0"]
COMM = "nccl:pg/0"
EVENT_IDS = [1, 2]
WORK_IDS = [1, 2]
STORAGES = [1, 2]
SIZE = 8


def _ranges(rng: random.Random) -> list:
    out = []
    for _ in range(rng.randint(0, 2)):
        start = rng.randint(0, SIZE - 1)
        out.append([rng.choice(STORAGES), start, rng.randint(start + 1, SIZE)])
    return out


def _event(rng: random.Random) -> list[dict]:
    """One draw of the generator: usually one event, two for a record-then-wait pair."""
    t, s, e = rng.choice(THREADS), rng.choice(STREAMS), rng.choice(EVENT_IDS)
    kind = rng.randrange(20)
    if kind < 3:
        return [{"e": "kernel", "thread": t, "stream": s, "reads": _ranges(rng), "writes": _ranges(rng), "op": "k"}]
    if kind == 3:
        return [{"e": "event_record", "thread": t, "event": e, "stream": s},
                {"e": "event_wait", "thread": rng.choice(THREADS), "event": e, "stream": rng.choice(STREAMS)}]
    return [[
        lambda: {"e": "host_access", "thread": t, "reads": _ranges(rng), "writes": _ranges(rng), "op": "h"},
        lambda: {"e": "event_record", "thread": t, "event": e, "stream": s},
        lambda: {"e": "event_wait", "thread": t, "event": e, "stream": s},
        lambda: {"e": "event_destroy", "event": e},
        lambda: {"e": "sync_event", "thread": t, "event": e},
        lambda: {"e": "sync_stream", "thread": t, "stream": rng.choice(STREAMS + [COMM])},
        lambda: {"e": "sync_device", "thread": t, "device": rng.choice([0, 1])},
        lambda: {"e": "thread_start", "parent": t, "child": rng.choice(THREADS)},
        lambda: {"e": "thread_join", "parent": t, "child": rng.choice(THREADS)},
        lambda: {"e": "stream_created", "thread": t, "stream": s},
        lambda: {"e": "alloc", "storage": rng.choice(STORAGES), "size": SIZE, "stream": s},
        lambda: {"e": "record_stream", "storage": rng.choice(STORAGES), "stream": s},
        lambda: {"e": "free", "thread": t, "storage": rng.choice(STORAGES)},
        lambda: {"e": "collective", "thread": t, "stream": s, "comm": COMM, "reads": _ranges(rng),
                 "writes": _ranges(rng), "async_op": rng.random() < 0.5, "work": rng.choice(WORK_IDS + [None]),
                 "op": "c"},
        lambda: {"e": "work_wait", "thread": t, "stream": s, "work": rng.choice(WORK_IDS),
                 "blocking": rng.random() < 0.5},
        lambda: {"e": "hand_over", "thread": t, "reads": _ranges(rng), "events": rng.sample(EVENT_IDS, rng.randint(0, 1)),
                 "op": "p"},
    ][kind - 4]()]


def program(rng: random.Random, max_events: int) -> list[dict]:
    events: list[dict] = []
    for _ in range(rng.randint(1, max_events)):
        events.extend(_event(rng))
    return events


def canonical(races) -> set:
    return {(r.kind, r.storage, r.start, r.end, r.earlier.seq, r.earlier.is_write, r.earlier.actor, r.later.seq,
             r.later.is_write, r.later.actor) for r in races}


def compare(events: list[dict]) -> tuple[set, set]:
    detector = Detector()
    replay(events, detector)
    return canonical(detector.races), canonical(HappensBefore.from_events(events).races())


def write_trace(path: Path, events: list[dict], note: str) -> None:
    header = {"e": "header", "format": FORMAT, "version": VERSION, "rank": 0, "world_size": 1, "note": note}
    path.write_text("".join(json.dumps(event) + "\n" for event in [header, *events]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-events", type=int, default=40, help="draws per program (default 40)")
    parser.add_argument("--out", default="fuzz_disagreements", help="folder for disagreeing programs")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    started = time.perf_counter()
    racy = races = events_total = 0
    disagreements: list[Path] = []
    for index in range(args.programs):
        events = program(rng, args.max_events)
        events_total += len(events)
        online, oracle = compare(events)
        racy += bool(oracle)
        races += len(oracle)
        if online != oracle:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"program-{args.seed}-{index}.jsonl"
            write_trace(path, events, f"detector only: {sorted(online - oracle)}; oracle only: "
                                      f"{sorted(oracle - online)}")
            disagreements.append(path)
    seconds = time.perf_counter() - started
    print(f"programs: {args.programs} (seed {args.seed}, up to {args.max_events} draws each, {events_total} events)")
    print(f"racy programs: {racy}; races compared: {races}")
    print(f"disagreements: {len(disagreements)}")
    for path in disagreements[:10]:
        print(f"  {path}")
    print(f"time: {seconds:.1f} s ({1000 * seconds / max(1, args.programs):.2f} ms per program)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
