"""How much plain source (files the prefilter does not detail) a scan could skip if it kept only the plain files
detailed code can reach, two ways (names and imports read with regexes, no parse):

- by name: a plain file is kept when it defines a function a kept file calls by name, or calls by name a function
  a kept file defines (to a fixed point);
- by import: a plain file is kept when a detailed module imports it (its callees) or it imports a detailed module
  (its callers), transitively, with the packages above each imported module.

    python benchmarks/plain_reach.py FOLDER

The by-name test is what the call graph's method resolution (FUZZY_METHOD_LIMIT) and runs_on_current_stream's roots
need to stay unchanged. Session 17: by name, vLLM 0.33.0 reaches all but 0.1 of its 27.5 MB of plain source
(DeepSpeed 0.19.8: 0.1 of 2.6 MB); by import, all but 0.6 MB (DeepSpeed: 0.0). Skipping plain files cannot pay on
these trees: a cheaper pass over them (or none, with the call graph built otherwise) is what could.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from streamcheck.rules.facts import needs_detail
from streamcheck.rules.options import StaticOptions

DEFINED = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)", re.M)
CALLED = re.compile(r"(\w+)\s*\(")
FROM_IMPORT = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?([^)\n]*)", re.M)
IMPORT = re.compile(r"^\s*import\s+([\w.]+)", re.M)


def modules(folder: Path) -> dict[str, str]:
    """Dotted module name -> source, for every readable .py file under `folder` (a package)."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        try:
            found[".".join(parts)] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return found


def imported(name: str, text: str, known: dict[str, str], packages: set[str]) -> set[str]:
    """The modules of `known` that `text` (module `name`) imports, with the packages above each."""
    package = name if name in packages else name.rpartition(".")[0]
    found = set()
    for dots, module, names in FROM_IMPORT.findall(text):
        if dots:
            base = package.split(".")
            module = ".".join(base[:len(base) - len(dots) + 1] + ([module] if module else []))
        found |= {f"{module}.{item.strip().split(' as ')[0]}" for item in names.split(",")} | {module}
    found |= set(IMPORT.findall(text))
    for module in list(found):
        parts = module.split(".")
        found |= {".".join(parts[:end]) for end in range(1, len(parts))}
    return found & known.keys()


def reached(start: set[str], edges: dict[str, set[str]]) -> set[str]:
    seen, stack = set(start), list(start)
    while stack:
        for other in edges[stack.pop()] - seen:
            seen.add(other)
            stack.append(other)
    return seen


def main(folder: Path) -> None:
    options = StaticOptions()
    known = modules(folder)
    packages = {name for name in known if (folder.parent / name.replace(".", "/") / "__init__.py").exists()}
    detailed = {name for name, text in known.items() if needs_detail(text, options)}
    plain = known.keys() - detailed
    size = lambda names: sum(len(known[name]) for name in names) / 1e6  # noqa: E731

    defined = {name: set(DEFINED.findall(text)) for name, text in known.items()}
    called = {name: set(CALLED.findall(text)) for name, text in known.items()}
    calls, defs = set().union(*(called[n] for n in detailed)), set().union(*(defined[n] for n in detailed))
    left = set(plain)
    while True:
        more = {name for name in left if defined[name] & calls or called[name] & defs}
        if not more:
            break
        left -= more
        for name in more:
            calls |= called[name]
            defs |= defined[name]

    imports = {name: imported(name, text, known, packages) for name, text in known.items()}
    importers: dict[str, set[str]] = {name: set() for name in known}
    for name, targets in imports.items():
        for target in targets:
            importers[target].add(name)
    unimported = plain - reached(detailed, imports) - reached(detailed, importers)

    print(f"{folder}: {len(known)} files, {len(detailed)} detailed, {len(plain)} plain ({size(plain):.1f} MB)")
    print(f"  not reached by name:   {len(left)} files, {size(left):.1f} MB")
    print(f"  not reached by import: {len(unimported)} files, {size(unimported):.1f} MB")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
