"""`scan --fix`, `--diff`, `--unsafe-fixes`: every racy example with a static finding is fixed by one inserted line,
the fixed file scans clean, a second --fix changes nothing, and the fixed twin is left as it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streamcheck.cli import main
from streamcheck.findings import ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding, Location
from streamcheck.fixes import apply_fixes, derive_fix

ROOT = Path(__file__).resolve().parents[2]
UNSAFE_HINT = "; {} more with --unsafe-fixes (they block the host: a performance change)"

# example -> (the inserted statement with its indentation, how the line after it starts, safe)
EXPECTED = {
    "async_collective": ("    work.wait()", "total = t1.sum()", True),
    "backward_hook_hpz": ("        side.wait_stream(torch.cuda.current_stream())", "with torch.cuda.stream(side):", True),
    "free_without_record_stream": ("    t1.record_stream(side)", "del t1", True),
    "host_read_after_d2h": ("    torch.cuda.current_stream().synchronize()", "total = h.sum()", False),
    "pinned_overwrite_h2d": ("    torch.cuda.current_stream().synchronize()", "h.fill_(7.0)", False),
    # The device is waited for before the host barrier that lets the peer processes read (unsafe: blocks).
    "symmetric_memory_barrier": ("    torch.cuda.synchronize()", "dist.barrier(group=cpu_group)", False),
    "ipc_export_handed_early": ("    torch.cuda.synchronize()", "return rebuild, args", False),
    "hpz_race": ("        self.allgather_stream.wait_stream(torch.cuda.current_stream())",
                 "with torch.cuda.stream(self.allgather_stream):", True),
    "future_wait_side": ("        future.wait()", "total = t.sum()", True),
    # The finding calls the stream `torch.cuda.Stream()`; the fix names it as the `with` does.
    "graph_replay": ("    side.wait_stream(torch.cuda.current_stream())", "with torch.cuda.stream(side):", True),
    # The write on a side stream, the read of its data on the current one: the current stream waits, before the read.
    "view_as_metadata": ("    torch.cuda.current_stream().wait_stream(side)", "total = total + z.sum()", True),
    # SC106 hands over its own edit (extra["fix_edit"]): the writing stream waits for the other, before the write.
    "user_threads": ("            s2.wait_stream(s1)", "t1.fill_(2.0)", True),
    "views_offset": ("        s2.wait_stream(s1)", "buf[N - 1 : 2 * N].fill_(2.0)", True),
    "overwrite_while_read": ("    torch.cuda.current_stream().wait_stream(side)", "staging.fill_(2.0)", True),
    "wrong_wait": ("    side.wait_stream(torch.cuda.current_stream())", "with torch.cuda.stream(side):", True),
    # A side stream nothing makes wait, and one filling a block the current stream just allocated: the side stream
    # waits for the current one before the `with` (inside it, `current_stream()` would be the side stream itself).
    "side_stream_overwrites_input": ("    copy_stream.wait_stream(torch.cuda.current_stream())",
                                     "with torch.cuda.stream(copy_stream):", True),
    "fresh_block_on_side_stream": ("    copy_stream.wait_stream(torch.cuda.current_stream())",
                                   "with torch.cuda.stream(copy_stream):", True),
    # The copy's destination read by the helper's caller: the helper waits before it returns it (unsafe).
    "host_read_after_return": ("    torch.cuda.current_stream().synchronize()", "return host", False),
    # An input made outside the function: the side stream waits for the current one, before the `with`.
    "input_not_waited": ("        self.side.wait_stream(torch.cuda.current_stream())",
                         "with torch.cuda.stream(self.side):", True),
    # A result handed out: the current stream waits for the side stream, right after the `with`.
    "result_not_waited": ("        torch.cuda.current_stream().wait_stream(self.stream)", "return self.staged", True),
    # A travelling handle: waited where the reader first turns to it.
    "handle_travels": ("    req.work.wait()", "req.work = None", True),
    # Made on a side stream, read on the current one: recorded for it before the read.
    "handoff_without_record_stream": ("    batch.record_stream(torch.cuda.current_stream())", "total = batch.sum()",
                                      True),
    # Returned from a side stream to a caller on the current stream: recorded for it, right before the return.
    "returned_from_side_stream": ("        gpu.record_stream(torch.cuda.current_stream())", "return gpu", True),
    # A Triton kernel's output read on the current stream: the current stream waits, before the read.
    "triton_kernel_write": ("    torch.cuda.current_stream().wait_stream(side)", "total = out.sum()", True),
    # A container cleared after a helper used its elements on a side stream: the current stream waits for that
    # stream before the clear (a list has no record_stream).
    "cleared_container_free": ("        torch.cuda.current_stream().wait_stream(self.stream)", "self.grads.clear()",
                               True),
    # Inside the hook: the side stream waits for the hook's current stream before the `with`.
    "hook_waits_default_stream": ("        self.reduce.wait_stream(torch.cuda.current_stream())",
                                  "with torch.cuda.stream(self.reduce):", True),
}
# Fixed twins the static rules still report (an engine false positive, the lead's to fix): only racy.py is fixed.
FIXED_TWIN_REPORTED: set[str] = set()
# Racy examples the static rules do not report (their races are runtime-only shapes): nothing to fix statically.
RUNTIME_ONLY = ("compiled_write", "free_then_reuse", "pinned_queue_handoff")
# Racy examples with a static finding but no derived fix: the wait belongs in another method than the `with`
# (the stream's name there is not known to be in scope).
NO_STATIC_FIX = ("offload_through_container", "record_stream_names_itself",
                 "handle_left_in_flight",  # (the waits go at the wrapper's end, a loop over its handles)
                 "bucket_across_hook_calls",  # (a wait for every earlier call's stream, which no line names)
                 "callback_handback",  # (the wait goes in the callback, another function than the `with`)
                 "stash_without_event_wait")  # (the wait goes after the take, which is the finding's line)


def scan(capsys, *args):
    code = main(["scan", "--no-progress", "--no-cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def copy_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def copy(example: str) -> Path:
        shutil.copytree(ROOT / "examples" / example, tmp_path / example)
        return tmp_path / example

    return copy


def test_every_racy_example_is_covered(capsys):
    racy = sorted(p.parent.name for p in (ROOT / "examples").glob("*/racy.py"))
    assert racy == sorted([*EXPECTED, *RUNTIME_ONLY, *NO_STATIC_FIX])
    for example in RUNTIME_ONLY + NO_STATIC_FIX:  # no static finding, or none with a fix: --fix does nothing
        path = str(ROOT / "examples" / example / "racy.py")
        # --diff, not --fix: a rule that starts to report one of these must not rewrite the repository's examples.
        assert scan(capsys, "--diff", path) == (0, "", "streamcheck: would fix 0 findings in 0 files\n")


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_fix_makes_each_racy_example_scan_clean(copy_of, capsys, example):
    folder = copy_of(example)
    racy, fixed = folder / "racy.py", folder / "fixed.py"
    before = racy.read_text(encoding="utf-8").splitlines()
    statement, next_line, safe = EXPECTED[example]
    assert scan(capsys, f"{example}/racy.py")[0] == 1

    args = ["--fix"] if safe else ["--fix", "--unsafe-fixes"]
    target, files = (f"{example}/racy.py", "1 file") if example in FIXED_TWIN_REPORTED else (example, "2 files")
    assert scan(capsys, *args, target) == (
        0, f"No findings in {files}.\n", "streamcheck: fixed 1 finding in 1 file, 0 left\n")
    after = racy.read_text(encoding="utf-8").splitlines()
    (line,) = [k for k in range(len(after)) if after[:k] + after[k + 1:] == before]  # one line inserted, no other
    assert after[line] == statement
    assert after[line + 1].strip().startswith(next_line)
    assert fixed.read_bytes() == (ROOT / "examples" / example / "fixed.py").read_bytes()

    # Idempotent: the fixed file has no finding, so a second --fix changes nothing.
    assert scan(capsys, *args, target) == (
        0, f"No findings in {files}.\n", "streamcheck: fixed 0 findings in 0 files, 0 left\n")
    assert racy.read_text(encoding="utf-8").splitlines() == after


@pytest.mark.parametrize("example", ["host_read_after_d2h", "pinned_overwrite_h2d", "symmetric_memory_barrier",
                                     "ipc_export_handed_early"])
def test_host_synchronize_fixes_need_unsafe_fixes(copy_of, capsys, example):
    folder = copy_of(example)
    original = (folder / "racy.py").read_bytes()
    code, out, err = scan(capsys, "--fix", example)
    assert code == 1
    assert err == "streamcheck: fixed 0 findings in 0 files, 1 left" + UNSAFE_HINT.format(1) + "\n"
    assert (folder / "racy.py").read_bytes() == original
    assert scan(capsys, "--diff", example) == (
        0, "", "streamcheck: would fix 0 findings in 0 files" + UNSAFE_HINT.format(1) + "\n")


FREE_SOURCE = """\
import torch


def step(side):
    t1 = torch.ones(4, device="cuda")
    with torch.cuda.stream(side):
        total = t1.sum()  # the use on the side stream
    del t1
    return total
"""


def test_diff_prints_the_fix_and_changes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "free.py").write_text(FREE_SOURCE, encoding="utf-8")
    assert scan(capsys, "--diff", "free.py") == (1, (
        "--- a/free.py\n"
        "+++ b/free.py\n"
        "@@ -5,5 +5,6 @@\n"
        "     t1 = torch.ones(4, device=\"cuda\")\n"
        "     with torch.cuda.stream(side):\n"
        "         total = t1.sum()  # the use on the side stream\n"
        "+    t1.record_stream(side)\n"
        "     del t1\n"
        "     return total\n"),
        "streamcheck: would fix 1 finding in 1 file\n")
    assert (tmp_path / "free.py").read_text(encoding="utf-8") == FREE_SOURCE


def _sc101(path="m.py", line=5, reader="self.side", writer=""):
    return Finding(
        rule="SC101", message="m", kind="RAW", primary=Location(path, 2, 5, role=ROLE_WRITE),
        related=(Location(path, line, 14, role=ROLE_STREAM_CONTEXT),),
        extra={"path": "x", "writer_stream": writer, "reader_stream": reader})


SOURCE = (b"import torch\r\n\r\n"
          b"def f(self):\r\n"
          b"    x.copy_(y)   # the write, oddly spaced\r\n"
          b"    # prefetch on the side stream\r\n"
          b"    with torch.cuda.stream(self.side):  # keep me\r\n"
          b"        use(x)\r\n")


def test_the_edit_keeps_comments_spacing_and_newlines():
    fix = derive_fix(_sc101(line=6))
    assert (fix.path, fix.line, fix.stream_line, fix.safe) == ("m.py", 6, 6, True)
    after, applied = apply_fixes(SOURCE, [fix, fix])  # the same fix twice: inserted once
    assert [(f.statement, f.description) for f in applied] == [(
        "self.side.wait_stream(torch.cuda.current_stream())",
        "insert `self.side.wait_stream(torch.cuda.current_stream())` before the `with` at line 6")]
    assert after == SOURCE.replace(b"    with", b"    self.side.wait_stream(torch.cuda.current_stream())\r\n    with")
    assert apply_fixes(after, [derive_fix(_sc101(line=7))]) == (after, [])  # already there


def test_the_stream_is_named_as_the_with_names_it():
    # The finding describes the stream by its constructor; the `with` names it `self.side`: that name is used.
    fix = derive_fix(_sc101(line=6, reader="torch.cuda.Stream()"))
    assert [f.statement for f in apply_fixes(SOURCE, [fix])[1]] == [
        "self.side.wait_stream(torch.cuda.current_stream())"]
    unnamed = SOURCE.replace(b"torch.cuda.stream(self.side)", b"torch.cuda.stream(torch.cuda.Stream())")
    assert apply_fixes(unnamed, [fix]) == (unnamed, [])  # no name the code could use


REVERSED = b"""import torch


def elsewhere(z, other):
    with torch.cuda.stream(other):
        z.fill_(1.0)


def step(side, z, x):
    with torch.cuda.stream(side):
        z.fill_(2.0)
    y = x + z
"""


def _reversed_finding(with_line: int, read_line: int) -> Finding:
    return Finding(rule="SC101", message="m", kind="RAW", primary=Location("m.py", with_line + 1, 9, role=ROLE_WRITE),
                   related=(Location("m.py", read_line, 9, role="read"),
                            Location("m.py", with_line, 10, role=ROLE_STREAM_CONTEXT)),
                   extra={"path": "z", "writer_stream": "torch.cuda.Stream()", "reader_stream": ""})


def test_a_write_on_a_side_stream_read_on_the_current_one():
    after, applied = apply_fixes(REVERSED, [derive_fix(_reversed_finding(10, 12))])
    assert [f.description for f in applied] == [
        "insert `torch.cuda.current_stream().wait_stream(side)` before the read at line 12"]
    assert after == REVERSED.replace(b"    y = x + z", b"    torch.cuda.current_stream().wait_stream(side)\n    y = x + z")
    # The `with` in another function: its stream's name is not in scope at the read.
    assert apply_fixes(REVERSED, [derive_fix(_reversed_finding(5, 12))]) == (REVERSED, [])
    assert derive_fix(_reversed_finding(10, 6)) is None  # a read before the `with`: not this shape


def test_no_fix_where_the_fields_do_not_determine_one():
    assert derive_fix(_sc101(writer="self.copy_stream")) is None  # two named streams
    no_context = Finding(rule="SC101", message="m", primary=Location("m.py", 2, 5),
                         extra={"writer_stream": "", "reader_stream": "s"})
    assert derive_fix(no_context) is None
    # The statement names torch: a module without `import torch` gets no edit.
    assert apply_fixes(SOURCE.replace(b"import torch", b"import numpy"), [derive_fix(_sc101(line=6))])[1] == []


def test_a_rule_can_hand_over_its_own_edit():
    finding = Finding(rule="SC104", message="m", primary=Location("m.py", 7, 9), extra={
        "fix_edit": {"path": "m.py", "line": 7, "insert": "x.record_stream(self.side)", "safe": True,
                     "description": "record x on the side stream"}})
    fix = derive_fix(finding)
    after, _ = apply_fixes(SOURCE, [fix])
    assert after.splitlines()[6:8] == [b"        x.record_stream(self.side)", b"        use(x)"]


def test_quiet_fix_prints_only_what_is_left(copy_of, capsys):
    copy_of("free_without_record_stream")
    assert scan(capsys, "-q", "--fix", "free_without_record_stream") == (0, "", "")
    assert scan(capsys, "-q", "--diff", "free_without_record_stream") == (0, "", "")
