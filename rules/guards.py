"""Orderings under one `if`, accesses under another: when a wait belongs to its own block's work.

The race query reads a wait inside an `if` as one that may run (a "must" reading of every guard floods real code
with correlated guards: `if self.overlap: s.wait_stream(c)` ... `if self.overlap: with stream(s): ...`). One shape
is read the other way: the wait sits in an `if` block that holds neither of the two accesses and itself does work
on the waiting stream after it, and the later access sits in an `if` block of its own whose test reads other names
only (FSDP2's foreach_reduce: `if all_reduce_group is not None: ar.wait_stream(rs); with stream(ar): all_reduce(out)`
then `if all_reduce_hook is not None: with stream(ar): all_reduce_hook(out)`, which waits for `rs` itself). The
wait serves its block's work; the way through the second block without the first (1-d FSDP with a hook) has no
wait, and the two tests say nothing about each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .orderings import Ordering, site_stream
from .streams import display

if TYPE_CHECKING:
    from .callgraph import Function
    from .program import Program

Position = tuple[int, int]


def serves_another_block(program: "Program", function: "Function", ordering: Ordering, after: Position,
                         before: Position) -> bool:
    """Whether `ordering` (between the accesses at `after` and `before` in `function`) belongs to an `if` block
    that holds neither access and works on the waiting stream after it, while the access at `before` sits in
    an `if` block whose test reads none of the names the ordering's tests read (see the module docstring)."""
    tests = function.facts.guard_tests
    line = ordering.line
    around_wait = [(first, last, names) for first, last, names in tests
                   if first <= line <= last and not first <= after[0] <= last and not first <= before[0] <= last]
    around_read = [(first, last, names) for first, last, names in tests
                   if first <= before[0] <= last and not first <= line <= last]
    if not around_wait or not around_read:
        return False
    wait_names = {name for _first, _last, names in around_wait for name in names}
    read_names = {name for _first, _last, names in around_read for name in names}
    waiter = display(ordering.waiter)
    if _related(wait_names, read_names) or _related(wait_names, {waiter}):
        return False  # correlated tests, or `if s is not None:` (no stream, no work on it, on the other way)
    first, last = min((f, l) for f, l, _names in around_wait)
    return any(first <= region.line <= last and (region.line, region.column) > (line, ordering.column)
               and site_stream(program, function, index) == ordering.waiter
               for index, region in enumerate(function.facts.regions))


def _related(names: set[str], others: set[str]) -> bool:
    """A name of one set is a name of the other, or a path below it (`self.cfg` and `self.cfg.overlap`)."""
    return any(a == b or a.startswith(b + ".") or b.startswith(a + ".") for a in names for b in others)
