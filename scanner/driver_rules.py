"""The rules the scan driver reports itself, SC001 (a file that could not be scanned) and SC002 (an unused
suppression), as entries of the rule catalogue (streamcheck/catalogue.py). Their documentation is DRIVER_RULES in
driver.py, beside the code that reports them.
"""

from __future__ import annotations

from streamcheck.catalogue import DRIVER, RuleInfo, entry

from .driver import DRIVER_RULES, SC001
from .suppressions import SC002

_NAMES = {SC001: "UnscannableFile", SC002: "UnusedSuppression"}
_LEVELS = {SC002: "warning"}  # a stale comment hides nothing yet: a warning, not an error


def catalogue_entries() -> list[RuleInfo]:
    return [entry(rule_id, summary, doc, DRIVER, _NAMES[rule_id], _LEVELS.get(rule_id, "error"))
            for rule_id, (summary, doc) in DRIVER_RULES.items()]
