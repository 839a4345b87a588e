"""Shadow state of one storage: what each byte range remembers about earlier accesses, FastTrack style.

A storage's bytes are split into sorted, disjoint segments [start, end); bytes nobody touched have no segment.
Each segment has a Cell: the last write and, since that write, the latest read of each actor. An access is checked
against exactly these (a later write or read by the same actor is ordered after its own earlier ones by program
order, so the latest one per actor is the one that matters); then it replaces them. A write of `buf[0:N]` and one of
`buf[N:2N]` touch different segments and never meet; overlapping ones share the overlapping bytes.

The caller passes the accessing actor's clock; an earlier access (actor A, time t) is ordered before the current
one when clock.get(A, 0) >= t (see clocks.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class Cell:
    """What one byte range remembers: the last write and, since it, the latest read of each actor (or None)."""

    __slots__ = ("write", "reads")

    def __init__(self, write=None, reads=None) -> None:
        self.write = write
        self.reads = reads

    def copy(self) -> "Cell":
        return Cell(self.write, dict(self.reads) if self.reads else None)


def _check(cell: Cell, access, clock: dict, start: int, end: int, found: list | None) -> list | None:
    """Append (earlier access, start, end) for each access in `cell` that conflicts with `access` unordered."""
    actor = access.actor
    write = cell.write
    if write is not None and write.actor != actor and clock.get(write.actor, 0) < write.clock:
        if found is None:
            found = []
        found.append((write, start, end))
    if access.is_write and cell.reads:
        for read in cell.reads.values():
            if read.actor != actor and clock.get(read.actor, 0) < read.clock:
                if found is None:
                    found = []
                found.append((read, start, end))
    return found


MIXED = "<several actors>"  # StorageShadow.actor once a second actor has touched the storage


class StorageShadow:
    """Byte-range shadow of one storage: parallel sorted lists of segment starts, ends and cells.

    `actor` is the one actor that made every access recorded so far, or MIXED: while a storage's whole history is
    one actor's, nothing in it can race with that actor (program order), which the detector uses to skip checks.
    """

    __slots__ = ("starts", "ends", "cells", "actor")

    def __init__(self, actor: str = MIXED) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.cells: list[Cell] = []
        self.actor = actor

    @classmethod
    def of_first_access(cls, access, start: int, end: int) -> "StorageShadow":
        """A storage's shadow after its first access (nothing to check yet): one segment."""
        shadow = cls(access.actor)
        shadow.starts.append(start)
        shadow.ends.append(end)
        shadow.cells.append(Cell(access) if access.is_write else Cell(None, {access.actor: access}))
        return shadow

    def access(self, access, clock: dict, start: int, end: int, found: list | None) -> list | None:
        """Check `access` of bytes [start, end) and record it. Returns `found`, extended with the conflicts."""
        starts, ends, cells = self.starts, self.ends, self.cells
        i = bisect_right(ends, start)
        if i < len(starts) and starts[i] == start and ends[i] == end:
            # The common case: the same tensor (or view) as last time.
            cell = cells[i]
            if self.actor != access.actor:  # a single actor's own history holds nothing to check
                found = _check(cell, access, clock, start, end, found)
            if access.is_write:
                cell.write = access
                cell.reads = None
            elif cell.reads is None:
                cell.reads = {access.actor: access}
            else:
                cell.reads[access.actor] = access
            return found
        if i < len(starts) and starts[i] <= start and end <= ends[i]:
            # Inside one segment (a view of a buffer written whole): one check, then at most three pieces.
            cell = cells[i]
            found = _check(cell, access, clock, start, end, found)
            if access.is_write:
                middle = Cell(access)
            else:
                middle = cell.copy()
                if middle.reads is None:
                    middle.reads = {access.actor: access}
                else:
                    middle.reads[access.actor] = access
            piece_starts, piece_ends, piece_cells = [start], [end], [middle]
            if starts[i] < start:
                piece_starts.insert(0, starts[i])
                piece_ends.insert(0, start)
                piece_cells.insert(0, cell)
            if end < ends[i]:
                piece_starts.append(end)
                piece_ends.append(ends[i])
                piece_cells.append(cell.copy() if starts[i] < start else cell)
            starts[i:i + 1] = piece_starts
            ends[i:i + 1] = piece_ends
            cells[i:i + 1] = piece_cells
            return found
        self._split_at(start)
        self._split_at(end)
        first = bisect_left(starts, start)
        last = bisect_left(starts, end)
        if access.is_write:
            for k in range(first, last):
                found = _check(cells[k], access, clock, starts[k], ends[k], found)
            starts[first:last] = [start]
            ends[first:last] = [end]
            cells[first:last] = [Cell(access)]
            return found
        new_starts, new_ends, new_cells = [], [], []
        pos = start
        for k in range(first, last):
            seg_start, seg_end, cell = starts[k], ends[k], cells[k]
            if pos < seg_start:  # untouched bytes between segments get their first history
                new_starts.append(pos)
                new_ends.append(seg_start)
                new_cells.append(Cell(None, {access.actor: access}))
            found = _check(cell, access, clock, seg_start, seg_end, found)
            if cell.reads is None:
                cell.reads = {access.actor: access}
            else:
                cell.reads[access.actor] = access
            new_starts.append(seg_start)
            new_ends.append(seg_end)
            new_cells.append(cell)
            pos = seg_end
        if pos < end:
            new_starts.append(pos)
            new_ends.append(end)
            new_cells.append(Cell(None, {access.actor: access}))
        starts[first:last] = new_starts
        ends[first:last] = new_ends
        cells[first:last] = new_cells
        return found

    def check_range(self, access, clock: dict, start: int, end: int) -> list | None:
        """Check `access` of bytes [start, end) without recording it (a hand-over to other processes)."""
        found = None
        starts, ends, cells = self.starts, self.ends, self.cells
        for k in range(bisect_right(ends, start), len(starts)):
            if starts[k] >= end:
                break
            found = _check(cells[k], access, clock, max(start, starts[k]), min(end, ends[k]), found)
        return found

    def check_all(self, access, clock: dict) -> list | None:
        """Check a write of every byte with history (a free) without recording it."""
        found = None
        for start, end, cell in zip(self.starts, self.ends, self.cells):
            found = _check(cell, access, clock, start, end, found)
        return found

    def _split_at(self, offset: int) -> None:
        """Make `offset` a segment boundary if it falls strictly inside a segment."""
        k = bisect_right(self.ends, offset)
        if k < len(self.starts) and self.starts[k] < offset:
            end = self.ends[k]
            self.ends[k] = offset
            self.starts.insert(k + 1, offset)
            self.ends.insert(k + 1, end)
            self.cells.insert(k + 1, self.cells[k].copy())
