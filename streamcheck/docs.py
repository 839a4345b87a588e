"""The rule catalogue as documentation: docs/rules/SCxxx.md, SARIF's help.markdown and helpUri, `explain`.

Every page is generated from the rule's own docstring (rules/scNNN_*.py, the driver's SC001/SC002, the runtime's
SC201-SC203), so the docs cannot drift from the code. Regenerate after editing a docstring:

    python -m streamcheck.docs            # rewrite docs/rules/*.md
    python -m streamcheck.docs --check    # exit 1 if a page is stale (what the test runs)

Docstring layout (rules/rule.py): a title line "SC101: summary", then sections "What it does:", "Why it is bad:",
"Example:", "Fix:" whose bodies are indented. Markdown: the title a heading, each section a subheading, the
Example body a Python code block, other bodies as paragraphs (indentation dropped).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

PROJECT_URL = "https://github.com/streamcheck/streamcheck"
DOCS_FOLDER = "docs/rules"
_SECTION = re.compile(r"^([A-Z][A-Za-z ,']+):\s*$")
_CODE_SECTIONS = ("Example", "Examples")

# Names for the rules whose module does not give one (SARIF's reportingDescriptor.name, PascalCase by convention).
_FIXED_NAMES = {"SC001": "UnscannableFile", "SC002": "UnusedSuppression", "SC201": "StreamRaceAtRuntime",
                "SC202": "FreeWithoutRecordStreamAtRuntime", "SC203": "HostDeviceRaceAtRuntime"}


@dataclass(frozen=True)
class RuleDoc:
    id: str
    name: str
    summary: str
    documentation: str
    origin: str  # "static", "driver" or "runtime"

    @property
    def help_uri(self) -> str:
        return help_uri(self.id)

    @property
    def markdown(self) -> str:
        return to_markdown(self.documentation)


def help_uri(rule_id: str) -> str:
    return f"{PROJECT_URL}/blob/main/{DOCS_FOLDER}/{rule_id}.md"


def catalogue() -> dict[str, RuleDoc]:
    """Every rule id -> its RuleDoc: the static rules, the scan driver's SC001/SC002 and the runtime SC2xx."""
    from streamcheck.instrument.offline.race_view import RUNTIME_RULES
    from streamcheck.rules.registry import all_rules
    from streamcheck.scanner.driver import DRIVER_RULES

    docs: dict[str, RuleDoc] = {}
    for rule_id, (summary, doc) in DRIVER_RULES.items():
        docs[rule_id] = RuleDoc(rule_id, _FIXED_NAMES[rule_id], summary, doc, "driver")
    for rule in all_rules():
        docs[rule.id] = RuleDoc(rule.id, rule_name(rule.id, rule.__module__), rule.summary, rule.documentation(),
                                "static")
    for rule_id, info in RUNTIME_RULES.items():
        docs[rule_id] = RuleDoc(rule_id, _FIXED_NAMES.get(rule_id, rule_id), info.summary, info.documentation,
                                "runtime")
    return dict(sorted(docs.items()))


def rule_name(rule_id: str, module: str = "") -> str:
    """SC101 in rules/sc101_cross_stream_consumer.py -> CrossStreamConsumer."""
    if rule_id in _FIXED_NAMES or not module:
        return _FIXED_NAMES.get(rule_id, rule_id)
    stem = module.rsplit(".", 1)[-1]
    stem = re.sub(r"^sc\d+_", "", stem)
    return "".join(part[:1].upper() + part[1:] for part in stem.split("_") if part) or rule_id


def to_markdown(documentation: str) -> str:
    lines = documentation.strip("\n").splitlines()
    if not lines:
        return ""
    out = [f"# {lines[0].strip()}", ""]
    section, body = None, []

    def flush():
        if section is None:
            text = textwrap.dedent("\n".join(body)).strip("\n")
            if text:
                out.extend([text, ""])
            return
        out.extend([f"## {section}", ""])
        text = textwrap.dedent("\n".join(body)).strip("\n")
        if section in _CODE_SECTIONS:
            out.extend(["```python", text, "```", ""])
        elif text:
            out.extend([_paragraphs(text), ""])

    for line in lines[1:]:
        match = _SECTION.match(line)
        if match:
            flush()
            section, body = match.group(1), []
        else:
            body.append(line)
    flush()
    return "\n".join(out).rstrip("\n") + "\n"


def _paragraphs(text: str) -> str:
    """Join wrapped lines of each paragraph; keep lines that start a list item or are indented further (code)."""
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        rows = block.splitlines()
        if any(row.startswith(("    ", "\t")) for row in rows):
            blocks.append("```python\n" + textwrap.dedent(block) + "\n```")
        elif any(row.lstrip().startswith(("- ", "* ")) for row in rows):
            blocks.append(block)
        else:
            blocks.append(" ".join(row.strip() for row in rows))
    return "\n\n".join(blocks)


def page(doc: RuleDoc) -> str:
    where = {"static": "`streamcheck scan` (static)", "driver": "`streamcheck scan` (the scan driver itself)",
             "runtime": "`streamcheck run`, `streamcheck report`, `streamcheck analyze` (runtime)"}[doc.origin]
    header = (f"<!-- generated from the rule's docstring by `python -m streamcheck.docs`; do not edit -->\n\n")
    body = doc.markdown
    title, _, rest = body.partition("\n")
    return (f"{header}{title}\n\nName: `{doc.name}`. Reported by {where}. Also: `streamcheck explain {doc.id}`.\n"
            f"{rest}")


def index(docs: dict[str, RuleDoc]) -> str:
    rows = ["<!-- generated by `python -m streamcheck.docs`; do not edit -->", "", "# streamcheck rules", "",
            "| id | name | what it finds |", "|---|---|---|"]
    rows += [f"| [{d.id}]({d.id}.md) | {d.name} | {d.summary} |" for d in docs.values()]
    return "\n".join(rows) + "\n"


def expected_pages(docs: dict[str, RuleDoc] | None = None) -> dict[str, str]:
    """file name under docs/rules -> its text."""
    docs = docs if docs is not None else catalogue()
    pages = {f"{d.id}.md": page(d) for d in docs.values()}
    pages["README.md"] = index(docs)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamcheck.docs", allow_abbrev=False,
                                     description="regenerate docs/rules/*.md from the rules' docstrings")
    parser.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    parser.add_argument("--out", default=None, help="folder (default: docs/rules of the source tree)")
    args = parser.parse_args(argv)
    folder = Path(args.out) if args.out else Path(__file__).resolve().parent.parent / DOCS_FOLDER
    pages = expected_pages()
    stale = [name for name, text in pages.items()
             if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != text]
    extra = sorted(p.name for p in folder.glob("*.md") if p.name not in pages) if folder.is_dir() else []
    if args.check:
        for name in stale:
            print(f"{folder / name}: stale; run `python -m streamcheck.docs`", file=sys.stderr)
        for name in extra:
            print(f"{folder / name}: no such rule; delete it or run `python -m streamcheck.docs`", file=sys.stderr)
        return 1 if stale or extra else 0
    folder.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (folder / name).write_text(pages[name], encoding="utf-8")
    for name in extra:
        (folder / name).unlink()
    print(f"{folder}: {len(stale)} page(s) written, {len(extra)} removed, {len(pages) - len(stale)} current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
