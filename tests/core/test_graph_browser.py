"""The HTML picture of a race, rendered by headless Chromium at 1280x800: the racing access, the write and the
missing edge are inside the window without scrolling, and no text is smaller than 12 px."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from streamcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)),
               None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="headless Chromium is not installed (apt-get install "
                                                        "chromium; .ci/run installs it when apt-get is there)")

MEASURE = """<script>
window.addEventListener("load", () => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
                        return [r.left, r.top, r.right, r.bottom]; };
  let smallest = 1e9;
  for (const t of document.querySelectorAll("svg text")) {
    smallest = Math.min(smallest, parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
  }
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({width: innerWidth, height: innerHeight, smallest: smallest,
    later: box(document.querySelector(".access-later")), earlier: box(document.querySelector(".access-earlier")),
    missing: box(document.querySelector(".missing-edge"))});
  document.body.appendChild(out);
});
</script>"""


def _measure(page: Path, width: int = 1280, height: int = 800) -> dict:
    """Render `page` in a viewport of width x height; headless Chromium's --window-size counts the window's frame
    too, so the size is corrected once by what the page saw."""
    probe = page.with_name("probe-" + page.name)
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    window = (width, height)
    for _ in range(2):
        done = subprocess.run([BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--window-size={window[0]},{window[1]}", "--virtual-time-budget=3000", "--dump-dom",
                               probe.as_uri()], capture_output=True, text=True, timeout=120)
        match = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
        assert match, done.stderr[-2000:]
        seen = json.loads(match.group(1).replace("&quot;", '"'))
        if (seen["width"], seen["height"]) == (width, height):
            break
        window = (window[0] + width - seen["width"], window[1] + height - seen["height"])
    return seen


def _inside(box, width, height) -> bool:
    left, top, right, bottom = box
    return 0 <= left and right <= width and 0 <= top and bottom <= height


@needs_browser
@pytest.mark.parametrize("trace", ["examples/traces/hpz_race.jsonl", "tests/instrument/offline/data"])
def test_the_race_fits_a_1280x800_window_with_readable_text(tmp_path, monkeypatch, capsys, trace):
    monkeypatch.chdir(ROOT)
    assert main(["report", trace, "--graph", str(tmp_path)]) == 1
    capsys.readouterr()
    page = sorted(tmp_path.glob("01-*.html"))[0]
    seen = _measure(page)
    assert (seen["width"], seen["height"]) == (1280, 800)
    for what in ("later", "earlier", "missing"):
        assert seen[what] is not None and _inside(seen[what], 1280, 800), (what, seen)
    assert seen["smallest"] >= 12, seen
    assert "event #" not in page.read_text(encoding="utf-8")


def test_dot_has_the_pictures_columns_so_time_runs_left_to_right(tmp_path, monkeypatch, capsys):
    """report's DOT ranks nodes by the HTML picture's columns (an invisible chain keeps the ranks in order), so the
    missing edge never points back in time; analyze --graph writes the same drawing."""
    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/traces/hpz_race.jsonl", "--graph", str(tmp_path)]) == 1
    dot = next(tmp_path.glob("01-*.dot")).read_text(encoding="utf-8")
    ranks = [re.findall(r"n(\d+);", group) for group in re.findall(r"\{ rank=same; ([^}]*)\}", dot)]
    rank_of = {node: k for k, group in enumerate(ranks) for node in group}
    labels = dict(re.findall(r'^    n(\d+) \[label="([^"]*)"', dot, re.M))
    earlier = next(n for n, label in labels.items() if label.startswith("earlier access"))
    later = next(n for n, label in labels.items() if label.startswith("racing access"))
    assert rank_of[earlier] < rank_of[later]
    assert f"  n{earlier} -> n{later} [style=dashed, color=red" in dot
    chain = re.findall(r"^  n(\d+) -> n(\d+) \[style=invis\];", dot, re.M)
    assert [(rank_of[a], rank_of[b]) for a, b in chain] == [(k, k + 1) for k in range(len(ranks) - 1)]
    assert "event #" not in dot and not re.search(r'label="#\d+', dot)
    out = tmp_path / "analyze.dot"
    assert main(["analyze", "examples/traces/hpz_race.jsonl", "--graph", str(out)]) == 1
    capsys.readouterr()
    assert out.read_text(encoding="utf-8") == dot.replace("digraph race {", "digraph race_1 {", 1)
