"""The import direction of the layers (docs/architecture.md): every module's load-time imports point into its own
layer or into the core, and the parts that must run without torch do not reach it. Imports inside functions (the CLI
loading a half when a command needs it) and under `if TYPE_CHECKING:` do not count."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"streamcheck": "streamcheck", "streamcheck.scanner": "scanner", "streamcheck.rules": "rules",
           "streamcheck.instrument": "instrument"}
# layer -> the layers it may import at load time. The core is streamcheck/ without the halves' packages and without
# commands/: the CLI imports only the command that runs (importlib), and a command loads the half it needs.
ALLOWED = {"core": {"core"}, "scanner": {"core", "scanner"}, "rules": {"core", "rules"},
           "instrument": {"core", "instrument"}, "commands": {"core", "commands", "scanner", "rules", "instrument"}}
# what runs on a machine without torch: the lint, every report, a trace's replay and the HB oracle
TORCH_FREE = ("streamcheck.instrument.offline", "streamcheck.instrument.detector", "streamcheck.instrument.races",
              "streamcheck.instrument.names", "streamcheck.instrument.trace", "streamcheck.instrument.runtime_rules")


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("scanner", "rules", "instrument", "commands") else "core"


def modules() -> dict[str, list[str]]:
    """module -> the modules it imports at load time (ours by full name; others by their top-level name)."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            name = ".".join([package, *parts])
            here = name if path.name == "__init__.py" else name.rpartition(".")[0]
            found[name] = sorted(set(_imports(ast.parse(path.read_text(encoding="utf-8")).body, here)))
    return found


def _imports(body: list, here: str):
    for node in body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _imports(node.body + node.orelse, here)
        elif isinstance(node, ast.Try):
            yield from _imports(node.body + node.orelse + node.finalbody, here)


def test_every_module_imports_along_the_layers():
    graph = modules()
    wrong = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
             if target.startswith("streamcheck.") and target in graph and layer(target) not in ALLOWED[layer(module)]]
    assert wrong == []


def test_the_torch_free_parts_reach_neither_torch_nor_libcst_at_load_time():
    graph = modules()
    reached = {}
    for start in (m for m in graph if layer(m) not in ("instrument", "commands") or m.startswith(TORCH_FREE)):
        stack, seen = [start], {start}
        while stack:
            for target in graph.get(stack.pop(), ()):
                if target.split(".")[0] in ("torch", "libcst"):
                    reached[start] = target
                elif target in graph and target not in seen:
                    seen.add(target)
                    stack.append(target)
    assert reached == {}


def test_the_runtime_half_never_imports_libcst():
    graph = modules()
    assert [m for m in graph if layer(m) == "instrument" and any(t.split(".")[0] == "libcst" for t in graph[m])] == []


def test_every_folder_of_the_distribution_is_checked():
    """A folder added to pyproject's package-dir, or a package with Python modules, is in the graph the tests read."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"] == FOLDERS
    graph = modules()
    # native_hook holds the hook's C++ sources (package data), no Python module
    assert [package for package in setuptools["packages"] if package not in graph] == [
        "streamcheck.instrument.native_hook"]
    assert {layer(m) for m in graph} == set(ALLOWED)
