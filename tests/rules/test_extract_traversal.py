"""The facts pass's own traversal (extract.py: one method lookup per node type, only the fields that can hold
nodes, no leaves) gives exactly the facts that ast.NodeVisitor's traversal of every node and field gives: on the
examples and on this package's own sources, in both the plain and the detailed mode."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streamcheck.rules import extract as extract_module
from streamcheck.rules.extract import _FactsVisitor, extract
from streamcheck.rules.facts import FileFacts, module_name
from streamcheck.rules.options import StaticOptions

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "examples").rglob("*.py")) + sorted((REPO / "rules").glob("*.py")) + sorted(
    (REPO / "instrument").glob("*.py"))


class _ReferenceVisitor(_FactsVisitor):
    """The same visitor walked the standard library's way."""

    def visit(self, node):
        return ast.NodeVisitor.visit(self, node)

    def _visit_with_hazards(self, node):
        self.hazards.see(node)
        return ast.NodeVisitor.visit(self, node)

    generic_visit = ast.NodeVisitor.generic_visit


def _reference_facts(source: str, path: str, options: StaticOptions, detailed: bool) -> FileFacts:
    module, is_package = module_name(path)
    facts = FileFacts(path=path, module=module, is_package=is_package, detailed=detailed)
    _ReferenceVisitor(facts, source.splitlines(), options, detailed).run(ast.parse(source, filename=path))
    return facts


@pytest.mark.parametrize("detailed", [False, True], ids=["plain", "detailed"])
def test_own_traversal_gives_the_facts_of_ast_nodevisitor(detailed):
    options = StaticOptions()
    assert len(SOURCES) > 60
    compared = 0
    for file in SOURCES:
        source, path = file.read_text(encoding="utf-8"), file.relative_to(REPO).as_posix()
        facts = extract(source, path, options, detailed)
        assert facts == _reference_facts(source, path, options, detailed), path
        compared += bool(facts.functions and any(fn.calls for fn in facts.functions))
    assert compared > 60


def test_every_node_type_of_these_sources_has_its_fields_read_from_its_signature():
    """No node type of the sources falls back to looking at every field: their signatures were all read."""
    seen = {type(node) for file in SOURCES for node in ast.walk(ast.parse(file.read_text(encoding="utf-8")))}
    fallback = sorted(kind.__name__ for kind in seen
                      if extract_module._child_fields(kind) is extract_module._ANY_FIELD)
    assert fallback == []
    assert extract_module._child_fields(ast.Attribute) == (("value", False),)
    assert extract_module._child_fields(ast.Compare) == (("left", False), ("comparators", True))
    assert extract_module._child_fields(ast.Name) == ()
