"""The rules over one program in two processes: the heaviest rule in a forked child, the others here.

A rule only reads the program (its lazy indexes are memos: the same value whichever process builds it), so a child
forked after the whole-program phase gives the same findings as the parent would; the child inherits the program
copy-on-write and sends back only its findings (pickled through a pipe). On DeepSpeed 0.19.8 SC101 takes 0.70 s CPU
of the rules' 1.05 s when it runs first, the other five rules 0.79 s when they run first: the phase takes the longer
of the two instead of their sum. The access indexes both sides match against (races.build_indexes) are built before
the fork, once.

Where fork is missing, the program is small, or the child fails in any way (an exception, a signal, a truncated
pipe), the rules run here, one after the other, as without it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import TYPE_CHECKING, Iterable

from streamcheck.findings import Finding

if TYPE_CHECKING:
    from .program import Program
    from .rule import Rule

# The rule run in the child: the most expensive by far (SC101, measured above); the rest together about match it.
CHILD_RULE = "SC101"
# Below this many functions a fork costs more than it saves (a fork of a large scan process takes ~10-50 ms).
MIN_FUNCTIONS = 2_000


def run_rules(rules: list[type["Rule"]], program: "Program", jobs: int,
              min_functions: int = MIN_FUNCTIONS) -> list[Finding]:
    """Every rule's findings, in the order of `rules` (each rule's in its own order)."""
    child = [rule for rule in rules if rule.id == CHILD_RULE]
    if jobs < 2 or not child or len(rules) < 2 or not hasattr(os, "fork") or len(program.functions) < min_functions:
        return _serial(rules, program)
    from .races import build_indexes

    build_indexes(program)  # (what both sides read: built once, here)
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return _serial(rules, program)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return _serial(rules, program)
    if pid == 0:  # the child: its rule's findings into the pipe, then gone without running any of the parent's exits
        status = 1
        try:
            os.close(read_end)
            data = pickle.dumps(list(child[0]().check(program)), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        here = {rule.id: list(rule().check(program)) for rule in rules if rule is not child[0]}
    except BaseException:  # (a rule's bug, ^C): no child left behind
        os.close(read_end)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    found = None
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        try:
            found = pickle.loads(data)
        except Exception:  # a truncated or broken result: run the rule here
            found = None
    if found is None:
        found = list(child[0]().check(program))
    here[child[0].id] = found
    return [finding for rule in rules for finding in here[rule.id]]


def _serial(rules: Iterable[type["Rule"]], program: "Program") -> list[Finding]:
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule().check(program))
    return findings
