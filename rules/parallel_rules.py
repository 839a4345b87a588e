"""The rules over one program in two processes: this one and a forked child taking rules from one queue.

A rule only reads the program (its lazy indexes are memos: the same value whichever process builds it), so a child
forked after the whole-program phase gives the same findings as this process would; a child inherits the program
copy-on-write and sends back only its rules' findings (pickled through a pipe).

At -j2 this process builds what the heavy rules all read (the access indexes, races.build_indexes, and the
whole-program values of `_shared`), forks the child, and then both take the rules from a queue, the most expensive
first (`HEAVIEST_FIRST`), one at a time: each takes the next rule when it is done with its last. The queue is a pipe
holding one byte per rule: a read of one byte from a pipe is atomic, so no rule is taken twice, and once it is empty
(its write end closed before the fork) a read says so. Measured alone after the indexes (CPU s): vLLM 0.33.0
indexes 2.1, SC104 1.6, SC101 1.3, SC107 0.9, SC106 0.5-0.8, SC105 0.5-0.7, SC102 0.15, SC103 0.08; DeepSpeed
0.19.8 indexes 0.33, SC101 0.39, SC104 0.29, SC107 0.15, SC106 0.13, SC105 0.12, SC102 0.03, SC103 0.01.
Before (session 21: SC101 alone in the child, the other six here) the six took twice SC101's time: vLLM rules
(dumped facts, alternated on a loaded machine) 8.4-11.0 s wall -> 6.8-8.0 s.

A second child for the rules that read no index, forked before the indexes (sessions 22-23, `EARLY_CHILD`), was
removed: it runs three processes where -j2 asks for two, costs 1-3 s more CPU on vLLM 0.33.0, and its wall gain did
not hold (rules wall in alternated pairs, without/with: vLLM 6.24/5.01, 5.61/4.56, 5.27/4.73, 5.28/4.05, 5.92/6.15,
5.32/6.19 s; DeepSpeed 0.19.8 1.13/1.21, 1.34/1.17, 0.90/0.88, 0.91/0.97 s).

Where fork is missing, the program is small, or a child fails in any way (an exception, a signal, a truncated
pipe), the rules a child did not hand back run here, one after the other, as without it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import TYPE_CHECKING, Callable, Iterable

from streamcheck.findings import Finding

if TYPE_CHECKING:
    from .program import Program
    from .rule import Rule

# Rules that read neither the access indexes nor `program.all_accesses` (checked: after any one of them alone the
# program holds no `races.by_key.*` memo and no `accesses_in` entry). A rule missing here only waits for the
# indexes; a rule listed here that did read them would only build them itself (the same findings, slower).
INDEX_FREE = frozenset({"SC102", "SC103", "SC105", "SC107"})
# The queue's order: the most expensive rules first (measured above), then any other in the order given.
HEAVIEST_FIRST = ("SC101", "SC104", "SC107", "SC106", "SC105", "SC102", "SC103")
# Below this many functions a fork costs more than it saves (a fork of a large scan process takes ~10-50 ms).
MIN_FUNCTIONS = 2_000

Found = dict[str, list[Finding]]  # rule id -> its findings, in the rule's order


def run_rules(rules: list[type["Rule"]], program: "Program", jobs: int,
              min_functions: int = MIN_FUNCTIONS) -> list[Finding]:
    """Every rule's findings, in the order of `rules` (each rule's in its own order)."""
    if jobs < 2 or len(rules) < 2 or len(rules) > 255 or not hasattr(os, "fork") \
            or len(program.functions) < min_functions:
        return _serial(rules, program)
    from .races import build_indexes

    queued = _heaviest_first(rules)
    child: _Child | None = None
    found: Found = {}
    try:
        if any(rule.id not in INDEX_FREE for rule in queued):
            build_indexes(program)  # (what the queue's rules all read: built once, here)
        if sum(rule.id in ("SC101", "SC104", "SC106") for rule in queued) > 1:
            _shared(program)
        queue = _queue(len(queued))
        if queue is not None:
            child = _fork(lambda: _take(queue, queued, program))
            found.update(_take(queue, queued, program))
            os.close(queue)
    except BaseException:  # (a rule's bug, ^C): no child left behind
        if child is not None:
            child.kill()
        raise
    if child is not None:
        found.update(child.collect())
    for rule in rules:  # whatever no process handed back (a child that failed, a fork or pipe that failed)
        if rule.id not in found:
            found[rule.id] = list(rule().check(program))
    return [finding for rule in rules for finding in found[rule.id]]


def _heaviest_first(rules: list[type["Rule"]]) -> list[type["Rule"]]:
    """In HEAVIEST_FIRST's order; a rule not listed after those, in the order given."""
    return sorted(rules, key=lambda rule: HEAVIEST_FIRST.index(rule.id) if rule.id in HEAVIEST_FIRST
                  else len(HEAVIEST_FIRST))


def _shared(program: "Program") -> None:
    """What SC101, SC104 and SC106 each build first (checked: each of them, alone after the indexes, builds all of
    these), built here before the queue's child is forked instead of on both sides (DeepSpeed 0.19.8: 0.13 s,
    vLLM 0.33.0: 0.5 s). Only whole-program values that read no table filled lazily from wherever it is first asked
    (not summaries.performed: a call cycle's value there depends on where its filling started)."""
    from .hooks import hook_run_functions
    from .orderings import launch_streams, orderings_in_program, recorded_streams

    program.runs_on_current_stream
    program.reached_from_region_any
    hook_run_functions(program)
    orderings_in_program(program)
    recorded_streams(program, "")
    launch_streams(program, "")


def _queue(count: int) -> int | None:
    """The read end of a pipe holding the bytes 0 .. count-1 and no writer left; None when no pipe could be made."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        os.write(write_end, bytes(range(count)))  # (far below a pipe's buffer: never blocks)
    finally:
        os.close(write_end)
    return read_end


def _take(queue: int, rules: list[type["Rule"]], program: "Program") -> Found:
    """The next rule of the queue, then the next, until it is empty; each rule's findings."""
    found: Found = {}
    while taken := os.read(queue, 1):
        rule = rules[taken[0]]
        found[rule.id] = list(rule().check(program))
    return found


class _Child:
    """A forked child computing a Found; `collect` reads it (an empty one when the child failed)."""

    def __init__(self, pid: int, read_end: int) -> None:
        self.pid, self.read_end = pid, read_end

    def collect(self) -> Found:
        with os.fdopen(self.read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            return {}
        try:
            found = pickle.loads(data)
        except Exception:  # a truncated or broken result: its rules run here
            return {}
        return found if isinstance(found, dict) else {}

    def kill(self) -> None:
        os.close(self.read_end)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _fork(work: Callable[[], Found]) -> _Child | None:
    """A child that runs `work` and pipes its result back, then exits without running any of this process's exits;
    None when no pipe or process could be made."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child
        status = 1
        try:
            os.close(read_end)
            data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    return _Child(pid, read_end)


def _serial(rules: Iterable[type["Rule"]], program: "Program") -> list[Finding]:
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule().check(program))
    return findings
