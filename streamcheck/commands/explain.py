"""`streamcheck explain SC101`: print a rule's documentation from the rule's own docstring."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", nargs="?", help="rule id, e.g. SC101; without it, list all rules")


def run(args: argparse.Namespace) -> int:
    from streamcheck.rules.registry import all_rules

    rules = {rule.id: rule for rule in all_rules()}
    if not args.rule:
        for rule_id, rule in sorted(rules.items()):
            print(f"{rule_id}  {rule.summary}")
        return 0
    rule = rules.get(args.rule.upper())
    if rule is None:
        print(f"streamcheck explain: unknown rule {args.rule!r}; known: {', '.join(sorted(rules))}", file=sys.stderr)
        return 2
    print(rule.documentation())
    return 0
