"""`streamcheck explain SC101`: print a rule's documentation from the rule's own docstring.

Covers the rules package's rules, the two the scan driver reports itself (SC001 unscannable file, SC002 unused
suppression) and the runtime detector's SC201-SC203. Without a rule id it lists them all.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", nargs="?", help="rule id, e.g. SC101; without it, list all rules")


def run(args: argparse.Namespace) -> int:
    from streamcheck.report.runtime import RUNTIME_RULES
    from streamcheck.rules.registry import all_rules
    from streamcheck.scanning import DRIVER_RULES

    docs = {rule_id: (summary, doc) for rule_id, (summary, doc) in DRIVER_RULES.items()}
    for rule in all_rules():
        docs[rule.id] = (rule.summary, rule.documentation())
    for rule_id, info in RUNTIME_RULES.items():
        docs[rule_id] = (info.summary, info.documentation)
    if not args.rule:
        for rule_id, (summary, _) in sorted(docs.items()):
            print(f"{rule_id}  {summary}")
        return 0
    entry = docs.get(args.rule.upper())
    if entry is None:
        print(f"streamcheck explain: unknown rule {args.rule!r}; known: {', '.join(sorted(docs))}", file=sys.stderr)
        return 2
    print(entry[1])
    return 0
