"""Rule discovery: every `rules/scNNN_*.py` module contributes its Rule subclasses; adding a rule is adding a file."""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache

from .rule import Rule

_RULE_MODULE = re.compile(r"^sc\d{3}_\w+$")


@lru_cache(maxsize=1)
def _discover() -> tuple[type[Rule], ...]:
    package = importlib.import_module(__package__)
    found: dict[str, type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not _RULE_MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.id:
                if value.__module__ != module.__name__:
                    continue  # imported from elsewhere
                if value.id != _id_of_module(info.name):  # rule_ids() reads the ids from the names
                    raise RuntimeError(f"{module.__name__} defines rule {value.id}: a rule's module is named after it")
                if value.id in found:
                    raise RuntimeError(f"rule id {value.id} is defined twice ({found[value.id].__module__})")
                found[value.id] = value
    return tuple(found[k] for k in sorted(found))


def rule_ids() -> tuple[str, ...]:
    """Every rule's id, from the modules' names (`sc101_*.py` holds SC101) without importing one: a scan checks the
    configuration's rule codes with these, and a warm scan in which nothing changed never needs the rules."""
    package = importlib.import_module(__package__)
    return tuple(sorted(_id_of_module(info.name) for info in pkgutil.iter_modules(package.__path__)
                        if _RULE_MODULE.match(info.name)))


def _id_of_module(name: str) -> str:
    return name[:5].upper()


def all_rules() -> list[type[Rule]]:
    """Every rule class, sorted by id."""
    return list(_discover())


def catalogue_entries() -> list:
    """The rules' entries in the rule catalogue (streamcheck/catalogue.py): the docstring is the documentation."""
    from streamcheck.catalogue import STATIC, entry, name_from_module

    return [entry(rule.id, rule.summary, rule.documentation(), STATIC, name_from_module(rule.__module__, rule.id))
            for rule in all_rules()]
