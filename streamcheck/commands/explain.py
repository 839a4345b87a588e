"""`streamcheck explain SC101`: print a rule's documentation from the rule catalogue (streamcheck/catalogue.py).

Covers the rules package's rules, the two the scan driver reports itself (SC001 unscannable file, SC002 unused
suppression) and the runtime detector's SC201-SC204. Without a rule id it lists them all.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", nargs="?", help="rule id, e.g. SC101; without it, list all rules")


def run(args: argparse.Namespace) -> int:
    from streamcheck.catalogue import catalogue

    docs = catalogue()
    if not args.rule:
        for rule_id, doc in docs.items():
            print(f"{rule_id}  {doc.summary}")
        return 0
    doc = docs.get(args.rule.upper())
    if doc is None:
        print(f"streamcheck explain: unknown rule {args.rule!r}; known: {', '.join(docs)}", file=sys.stderr)
        return 2
    print(doc.documentation.rstrip("\n"))
    print(f"\nOnline: {doc.help_uri}")
    return 0
