"""benchmarks/real_code.py on a fake corpus of two tiny packages (no network): every finding must have a triage
row; missing rows fail the run and are listed, stale rows only warn, precision counts real + hazard."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import Package
from corpus_triage import COLUMNS, TriageRow, load_triage, match
from real_code import main

# The simplest SC101 shape (the rule's first INVALID example): written on the current stream, read under `s`.
RACY = """import torch

def run(x, y, s):
    x.copy_(y)
    with torch.cuda.stream(s):
        z = x * 2
"""
WRITE_LINE = 4
PACKAGES = (Package("pkga", "1.0", "sdist", ("pkga",)), Package("pkgb", "2.0", "wheel", ("pkgb",)))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Two unpacked packages, as benchmarks/corpus.py leaves them in its cache."""
    cache = tmp_path / "cache"
    for package in PACKAGES:
        tree = cache / package.label
        (tree / package.name).mkdir(parents=True)
        (tree / package.name / "__init__.py").write_text("")
        (tree / package.name / "racy.py").write_text(RACY)
        (tree / ".unpacked").touch()
    return cache


def run(corpus: Path, triage: Path, *options: str) -> int:
    return main(["--triage", str(triage), "--jobs", "1", *options], packages=PACKAGES, cache=corpus)


def untriaged(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("not triaged: ")]


def rewrite(triage: Path, verdicts: dict[str, str]) -> None:
    """Keep the rows of the packages in `verdicts`, with that verdict and a reason."""
    rows = [row for row in load_triage(triage) if row.package in verdicts]
    lines = ["\t".join(COLUMNS)]
    for row in rows:
        cells = [row.package, row.version, row.rule, row.kind, row.path, str(row.line), row.detail, row.other,
                 verdicts[row.package], "judged by reading it"]
        lines.append("\t".join(cells))
    triage.write_text("\n".join(lines) + "\n")


def test_missing_rows_fail_and_are_listed_then_written(corpus, tmp_path, capsys):
    triage = tmp_path / "triage.tsv"
    assert run(corpus, triage, "--write-missing") == 1
    listed = untriaged(capsys.readouterr().out)
    assert [line.split(" (with ")[0].rsplit(" ", 1)[0] for line in listed] == [
        f"not triaged: pkga 1.0 SC101 RAW pkga/racy.py:{WRITE_LINE}",
        f"not triaged: pkgb 2.0 SC101 RAW pkgb/racy.py:{WRITE_LINE}",
    ]
    rows = load_triage(triage)
    assert [(r.package, r.version, r.rule, r.path, r.line, r.verdict) for r in rows] == [
        ("pkga", "1.0", "SC101", "pkga/racy.py", WRITE_LINE, "todo"),
        ("pkgb", "2.0", "SC101", "pkgb/racy.py", WRITE_LINE, "todo"),
    ]
    # The written rows are exactly the listed keys: a second run finds every finding triaged (as todo).
    assert run(corpus, triage) == 0
    assert "total: 2 findings; todo 2; not triaged 0" in capsys.readouterr().out


def test_one_package_untriaged_exits_1_with_its_key(corpus, tmp_path, capsys):
    triage = tmp_path / "triage.tsv"
    run(corpus, triage, "--write-missing")
    rewrite(triage, {"pkga": "real"})
    capsys.readouterr()
    assert run(corpus, triage) == 1
    out = capsys.readouterr().out
    [line] = untriaged(out)
    assert line.startswith(f"not triaged: pkgb 2.0 SC101 RAW pkgb/racy.py:{WRITE_LINE} ")
    assert "total: 2 findings; real 1; not triaged 1" in out
    assert "real + hazard: 1; precision 50 %" in out


def test_complete_triage_exits_0_and_stale_rows_only_warn(corpus, tmp_path, capsys):
    triage = tmp_path / "triage.tsv"
    run(corpus, triage, "--write-missing")
    rewrite(triage, {"pkga": "real", "pkgb": "hazard"})
    with open(triage, "a") as handle:
        handle.write("pkga\t1.0\tSC104\tFREE\tpkga/racy.py\t99\tgone\t\tfalse\ta finding that disappeared\n")
    capsys.readouterr()
    assert run(corpus, triage) == 0
    out = capsys.readouterr().out
    assert untriaged(out) == []
    assert "stale (finding gone): pkga 1.0 SC104 FREE pkga/racy.py:99 gone (with -)  [false]" in out
    assert "real + hazard: 2; precision 100 %" in out
    # Scanning one package: the other package's rows are neither used nor stale.
    assert run(corpus, triage, "--package", "pkgb") == 0
    out = capsys.readouterr().out
    assert "stale" not in out and "total: 1 findings; hazard 1; not triaged 0" in out
    assert out.splitlines()[0].startswith("pkgb 2.0 (wheel, pkgb/): 2 files, ")


def test_unknown_package_is_a_usage_error(corpus, tmp_path):
    with pytest.raises(SystemExit) as stop:
        run(corpus, tmp_path / "t.tsv", "--package", "nosuch")
    assert stop.value.code == 2


def test_match_gives_each_row_to_one_finding():
    key = ("p", "1", "SC101", "RAW", "p/a.py", 3, "x", "p/a.py:5")
    row = TriageRow(*key, "false", "why")
    result = match([key, key], [row], {("p", "1")})
    assert (dict(result.verdicts), result.missing, result.stale) == ({"false": 1}, [key], [])
    result = match([key], [row, row], {("p", "1")})
    assert (dict(result.verdicts), result.missing, result.stale) == ({"false": 1}, [], [row])
    assert match([], [row], {("q", "1")}).stale == []


def test_bad_verdict_names_the_line(tmp_path):
    triage = tmp_path / "t.tsv"
    triage.write_text("\t".join(COLUMNS) + "\np\t1\tSC101\tRAW\tp/a.py\t3\tx\t\tmaybe\twhy\n")
    with pytest.raises(ValueError, match=r"t.tsv:2: verdict 'maybe' is not one of real, hazard"):
        load_triage(triage)
