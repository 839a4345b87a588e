"""Summarize the seed-workload runs of gpu_job.sh: median step times, loss equality, findings per run.

    python3 summarize.py RUNS_DIR OUT_DIR

RUNS_DIR holds seed-<mode>-<version>-<N>steps.json (train.py --result) and, for instrumented runs,
sc-<mode>-<version>-<N>steps/streamcheck-rank*.jsonl. Writes OUT_DIR/seed-summary.txt and seed-results.json.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from streamcheck.instrument.offline.merge import merge

NAME = re.compile(r"seed-(plain|sc)-(\d+\.\d+\.\d+)-(\d+)steps\.json$")


def main(runs: Path, out: Path) -> int:
    rows = {}
    for path in sorted(runs.glob("seed-*.json")):
        match = NAME.search(path.name)
        if not match:
            continue
        mode, version, steps = match.groups()
        result = json.loads(path.read_text())
        tag = f"{mode}-{version}-{steps}steps"
        row = {"mode": mode, "version": version, "steps": int(steps), "median_step_ms": result["median_step_ms"],
               "median_step_ms_after_first": result.get("median_step_ms_after_first"), "losses": result["losses"],
               "step_ms": result["step_ms"]}
        if mode == "sc":
            merged = merge([runs / f"sc-{tag}"])
            row["ranks"] = sorted(merged.ranks)
            row["errors"] = merged.errors
            row["findings"] = [
                {"rule": f.rule, "kind": f.kind, "count": f.count, "ranks": f.extra.get("ranks"),
                 "primary": f"{f.primary.path}:{f.primary.line} ({f.primary.note})",
                 "related": [f"{r.role} {r.path}:{r.line} ({r.note})" for r in f.related[:1]],
                 "message": f.message, "later_stack": f.extra.get("later_stack", [])[:6],
                 "earlier_stack": f.extra.get("earlier_stack", [])[:6]}
                for f in sorted(merged.findings, key=lambda f: -f.count)
            ]
        rows[tag] = row
    lines = []
    for tag, row in rows.items():
        lines.append(f"{tag}: median step {row['median_step_ms']:.1f} ms "
                     f"(after first: {row['median_step_ms_after_first']:.1f} ms), losses {row['losses']}")
        if row["mode"] == "sc":
            lines.append(f"  instrumented ranks {row['ranks']}, internal errors {row['errors']}, "
                         f"{len(row['findings'])} finding(s)")
            for f in row["findings"]:
                lines.append(f"  - {f['rule']} {f['kind']} x{f['count']} ranks {f['ranks']}: {f['message']}")
                lines.append(f"    primary {f['primary']}; {'; '.join(f['related'])}")
                lines.append(f"    later stack: {f['later_stack']}")
                lines.append(f"    earlier stack: {f['earlier_stack']}")
            plain = rows.get(tag.replace("sc-", "plain-", 1))
            if plain:
                same = plain["losses"] == row["losses"]
                ratio = row["median_step_ms"] / plain["median_step_ms"]
                lines.append(f"  vs plain: losses bit-identical: {same}; median step {row['median_step_ms']:.1f} ms vs "
                             f"{plain['median_step_ms']:.1f} ms = {ratio:.2f}x")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out.mkdir(parents=True, exist_ok=True)
    (out / "seed-summary.txt").write_text(text)
    (out / "seed-results.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
