"""The rule catalogue: every rule's id, name, summary, documentation, where it is reported, and how sure it is.

Three kinds of rule register here, each from the code that reports it:

    static   rules/scNNN_*.py, through rules/registry.py's `catalogue_entries()` (the docstring is the docs)
    driver   SC001 / SC002, which the scan driver reports itself (scanner/driver_rules.py)
    runtime  SC201-SC203, which the detector reports (instrument/runtime_rules.py's `catalogue_entries()`)

The core imports neither half at module level: `catalogue()` imports the providers in PROVIDERS when first asked.
`streamcheck explain`, the docs generator (streamcheck/docs.py), `scan --statistics`, rule-id checking and the output
formats (SARIF's rule list) read only this module.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from streamcheck.constants import PROJECT_URL

DOCS_FOLDER = "docs/rules"
STATIC, DRIVER, RUNTIME = "static", "driver", "runtime"

# Modules with a `catalogue_entries()` function, in the order their rules are listed when ids tie (they never do).
PROVIDERS = ("streamcheck.scanner.driver_rules", "streamcheck.rules.registry", "streamcheck.instrument.runtime_rules")


@dataclass(frozen=True)
class RuleInfo:
    """One rule as every report and page shows it.

    documentation: "SC101: summary" then the sections "What it does:", "Why it is bad:", "Example:", "Fix:" with
    indented bodies (rules/rule.py). name: PascalCase (SARIF's reportingDescriptor.name), "" when unknown.
    level: the SARIF level of its findings. origin: STATIC, DRIVER or RUNTIME ("" for a rule not in the catalogue).
    """

    id: str
    summary: str = ""
    documentation: str = ""
    name: str = ""
    origin: str = ""
    level: str = "error"

    @property
    def help_uri(self) -> str:
        return help_uri(self.id)

    @property
    def precision(self) -> str:
        """SARIF's precision: runtime races were observed in an execution and SC001/SC002 are facts about a file;
        static rules are queries over a model that can miss an ordering the code has."""
        return "very-high" if self.origin in (RUNTIME, DRIVER) else "high"

    @property
    def markdown(self) -> str:
        from streamcheck.docs import to_markdown

        return to_markdown(self.documentation)


def help_uri(rule_id: str) -> str:
    return f"{PROJECT_URL}/blob/main/{DOCS_FOLDER}/{rule_id}.md"


def entry(rule_id: str, summary: str, documentation: str, origin: str, name: str = "",
          level: str = "error") -> RuleInfo:
    """A provider's entry; the documentation is dedented (docstrings, triple-quoted literals)."""
    return RuleInfo(rule_id, summary, inspect.cleandoc(documentation) + "\n", name or rule_id, origin, level)


def documentation(rule_id: str, summary: str, sections: Iterable[tuple[str, str]]) -> str:
    """Documentation in the catalogue's layout from (title, body) sections."""
    body = "\n\n".join(f"{title}:\n" + "\n".join("    " + line for line in text.splitlines())
                       for title, text in sections)
    return f"{rule_id}: {summary}\n\n{body}\n"


def name_from_module(module: str, rule_id: str) -> str:
    """rules/sc101_cross_stream_consumer.py -> CrossStreamConsumer."""
    stem = re.sub(r"^sc\d+_", "", module.rsplit(".", 1)[-1])
    return "".join(part[:1].upper() + part[1:] for part in stem.split("_") if part) or rule_id


@lru_cache(maxsize=1)
def _load() -> tuple[RuleInfo, ...]:
    found: dict[str, RuleInfo] = {}
    for provider in PROVIDERS:
        for info in importlib.import_module(provider).catalogue_entries():
            if info.id in found:
                raise RuntimeError(f"rule id {info.id} is registered twice ({provider})")
            found[info.id] = info
    return tuple(found[rule_id] for rule_id in sorted(found))


def catalogue(origin: str | None = None) -> dict[str, RuleInfo]:
    """rule id -> RuleInfo, sorted by id; only the rules of `origin` when given."""
    return {info.id: info for info in _load() if origin is None or info.origin == origin}


def lookup(rule_id: str) -> RuleInfo:
    """The catalogue's entry, or a bare RuleInfo for an id it does not know (a test's own rule)."""
    return catalogue().get(rule_id) or RuleInfo(rule_id)
