"""How much host memory a Detector's state holds: the figure a soak run watches for growth.

Walks the shadow state (segments, cells, the accesses they point to), the vector clocks, events, work handles,
allocations and kept races, and sums `sys.getsizeof` of each object once (accesses shared by several cells are
counted once). Not for the per-op path: it visits every object, so call it every few hundred steps.
"""

from __future__ import annotations

import sys
from typing import Any


def shadow_state_size(detector: Any) -> dict[str, int]:
    """{storages, segments, accesses, actors, events, works, allocations, pending_frees, races, bytes} now."""
    if callable(getattr(detector, "state_size", None)):  # the C++ detector counts its own (native_detector.py)
        return detector.state_size()
    size = sys.getsizeof
    total = size(detector.shadows)
    seen: set[int] = set()
    segments = 0
    # freed blocks whose pool stream has not worked since keep their history until it does (detector.free)
    pending = [free for frees in list(detector._pending_frees.values()) for free in list(frees)]
    total += size(detector._pending_frees) + sum(size(free) + size(free.held) for free in pending)
    for shadow in list(detector.shadows.values()) + [free.shadow for free in pending]:
        total += size(shadow) + size(shadow.starts) + size(shadow.ends) + size(shadow.cells)
        segments += len(shadow.cells)
        for cell in shadow.cells:
            total += size(cell)
            accesses = [cell.write] if cell.write is not None else []
            if cell.reads:
                total += size(cell.reads)
                accesses.extend(cell.reads.values())
            for access in accesses:
                if id(access) not in seen:
                    seen.add(id(access))
                    total += size(access)
    clocks = detector.clocks
    # a clock's keys are the actor names every clock shares: counted once, with of_actor
    total += sum(size(actor) for actor in list(clocks.of_actor))
    for table in (clocks.of_actor, clocks.of_event, clocks.of_work):
        total += size(table) + sum(size(vc) for vc in list(table.values()))
    total += size(detector.allocations) + sum(size(a) for a in list(detector.allocations.values()))
    total += size(detector.races) + sum(size(r) for r in detector.races)
    return {
        "storages": len(detector.shadows),
        "segments": segments,
        "accesses": len(seen),
        "actors": len(clocks.of_actor),
        "events": len(clocks.of_event),
        "works": len(clocks.of_work),
        "allocations": len(detector.allocations),
        "pending_frees": len(pending),
        "races": len(detector.races),
        "bytes": total,
    }
