"""The patches a runtime hook module puts on other code, and their undoing: one `Patches` per hook module.

A patch replaces an attribute of a class or module and remembers what was there (None when the attribute was
inherited: undoing it deletes the replacement, so the base class's shows again). A module not imported yet is
patched right after its first import (`PatchOnImport`), so the watch never imports what the program may not use.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` right after `name` is executed, the first time it is imported."""

    def __init__(self, name: str, patch: Any) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        patch = self.patch

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


class Patches:
    """What one hook module replaced, to undo it in reverse order."""

    def __init__(self) -> None:
        self.saved: list[tuple[Any, str, Any]] = []
        self.finders: list[PatchOnImport] = []

    def set(self, owner: Any, name: str, replacement: Any) -> None:
        self.saved.append((owner, name, vars(owner).get(name)))
        setattr(owner, name, replacement)

    def on_import(self, name: str, patch: Callable[[Any], None]) -> None:
        """`patch(module)` now if `name` is imported, else right after its first import."""
        if name in sys.modules:
            patch(sys.modules[name])
            return
        finder = PatchOnImport(name, patch)
        self.finders.append(finder)
        sys.meta_path.insert(0, finder)

    def undo(self) -> None:
        for finder in self.finders:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
        self.finders = []
        while self.saved:
            owner, name, original = self.saved.pop()
            if original is None:
                delattr(owner, name)  # it was inherited: the base class's shows again
            else:
                setattr(owner, name, original)
