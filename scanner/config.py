"""`[tool.streamcheck]` in pyproject.toml, merged with the same options given on the command line.

Keys (all optional):

    select            rule ids or prefixes to report ("SC1" = every SC1xx); default: all rules
    ignore            rule ids or prefixes never to report
    per-file-ignores  {glob: [rule ids or prefixes]}; globs are relative to the config file's folder
    exclude           globs of paths never scanned (replaces the default list)
    extend-exclude    globs added to `exclude`
    stream-contexts   extra callables whose `with` block switches the current stream (e.g. "my_accel.stream")
    collectives       extra collective function names (e.g. "my_comm.all_gather_into")
    sync-callables    extra callables that order streams (e.g. "my_accel.barrier_streams")
    generic-attributes extra attribute names too common to pair a write and a read by name alone ("payload")
    max-file-size-kb  files larger than this are skipped with a notice (generated code); default 1024
    respect-gitignore leave out what .gitignore ignores when walking folders; default true
    force-exclude     apply the excludes to files named on the command line too; default false (a file named
                      explicitly is scanned even inside an excluded folder)

A glob without "/" matches any single path component ("build", "*_pb2.py"); a glob with "/" matches the path
relative to the project root ("src/gen/*"). An unknown key or a value of the wrong type is a ConfigError, which
the scan command reports with exit 2, naming the key and the file.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase, translate
from pathlib import Path
from typing import Any

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".streamcheck_cache", ".cache", ".eggs", "*.egg-info", "build", "dist", "node_modules", "site-packages",
)
DEFAULT_MAX_FILE_SIZE_KB = 1024


class ConfigError(Exception):
    """A bad option: `key` and `source` (file or "command line") say where, `message` says what is wrong."""

    def __init__(self, source: str, key: str, message: str):
        if not key:  # the file as a whole (unreadable, not TOML, no table): the message says it all
            text = message
        elif source == "command line":
            text = f"command line: {key}: {message}"
        else:
            text = f"{source}: [tool.streamcheck] {key}: {message}"
        super().__init__(text)
        self.source, self.key, self.message = source, key, message


@dataclass(frozen=True)
class ScanConfig:
    """Everything that decides what a scan reads and reports. `root` anchors relative globs."""

    root: Path = field(default_factory=Path.cwd)
    source: str = ""  # the pyproject.toml it came from, "" if none
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    stream_contexts: tuple[str, ...] = ()
    collectives: tuple[str, ...] = ()
    sync_callables: tuple[str, ...] = ()
    generic_attributes: tuple[str, ...] = ()
    max_file_size_kb: int = DEFAULT_MAX_FILE_SIZE_KB
    respect_gitignore: bool = True
    force_exclude: bool = False
    # (source, key, code) of every rule code given in select / ignore / per-file-ignores, so that a code no rule
    # has can be reported naming where it came from once the rule ids are known (check_rule_codes).
    code_origins: tuple[tuple[str, str, str], ...] = field(default=(), compare=False)

    # -- what to report -------------------------------------------------------------------------------------------
    def rule_enabled(self, rule_id: str) -> bool:
        if self.select and not _matches_code(rule_id, self.select):
            return False
        return not _matches_code(rule_id, self.ignore)

    def rule_enabled_for(self, rule_id: str, rel_path: str) -> bool:
        """`rule_enabled`, then per-file-ignores for `rel_path` (relative to root, '/'-separated)."""
        if not self.rule_enabled(rule_id):
            return False
        for pattern, codes in self.per_file_ignores:
            if path_matches(rel_path, pattern) and _matches_code(rule_id, codes):
                return False
        return True

    # -- what to read ---------------------------------------------------------------------------------------------
    def is_excluded(self, rel_path: str) -> bool:
        """For a file named on the command line: any component, or the whole path, matches an exclude."""
        return any(path_matches(rel_path, p) for p in self.exclude + self.extend_exclude)

    def excludes_entry(self, name: str, rel_path: str) -> bool:
        """For a file or folder met while walking a given folder: only its own name counts for name globs, so
        scanning `.venv/lib/.../site-packages/pkg` on purpose works although `.venv` is excluded by default."""
        name_globs, path_globs = _entry_globs(self.exclude + self.extend_exclude)
        if name_globs is not None and name_globs.match(name):
            return True
        return any(path_matches(rel_path, pattern) for pattern in path_globs)

    def relative(self, path: Path) -> str:
        """`path` relative to root, '/'-separated; the absolute path if it lies outside root."""
        try:
            return Path(os.path.abspath(path)).relative_to(self.root).as_posix()
        except ValueError:
            return Path(os.path.abspath(path)).as_posix()

    def static_options(self):
        """The rules' StaticOptions for this config (imports the rules package, so call it only when scanning)."""
        from streamcheck.rules.options import StaticOptions

        return StaticOptions(
            stream_contexts=self.stream_contexts,
            collectives=self.collectives,
            sync_callables=self.sync_callables,
            generic_attributes=self.generic_attributes,
        )


@functools.lru_cache(maxsize=16)
def _entry_globs(patterns: tuple[str, ...]) -> tuple[re.Pattern | None, tuple[str, ...]]:
    """The name globs as one regular expression (what fnmatchcase does for each, in one match: the walk asks
    for every file and folder), and the globs with a "/", matched against the root-relative path."""
    names, paths = [], []
    for pattern in patterns:
        pattern = pattern.strip().rstrip("/")
        (paths if "/" in pattern.removeprefix("./") else names).append(pattern)
    joined = "|".join(f"(?:{translate(pattern)})" for pattern in names)
    return (re.compile(joined) if names else None), tuple(paths)


def path_matches(rel_path: str, pattern: str) -> bool:
    pattern = pattern.strip().rstrip("/")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    if "/" not in pattern:
        return any(fnmatchcase(part, pattern) for part in rel_path.split("/"))
    return fnmatchcase(rel_path, pattern) or fnmatchcase(rel_path, pattern + "/*")


def _matches_code(rule_id: str, codes: tuple[str, ...]) -> bool:
    return any(code == "ALL" or rule_id.startswith(code) for code in codes)


# -- loading -----------------------------------------------------------------------------------------------------

# key in the file -> (field name, kind)
_KEYS: dict[str, tuple[str, str]] = {
    "select": ("select", "codes"),
    "ignore": ("ignore", "codes"),
    "per-file-ignores": ("per_file_ignores", "per-file"),
    "exclude": ("exclude", "strings"),
    "extend-exclude": ("extend_exclude", "strings"),
    "stream-contexts": ("stream_contexts", "strings"),
    "collectives": ("collectives", "strings"),
    "sync-callables": ("sync_callables", "strings"),
    "generic-attributes": ("generic_attributes", "strings"),
    "max-file-size-kb": ("max_file_size_kb", "positive int"),
    "respect-gitignore": ("respect_gitignore", "bool"),
    "force-exclude": ("force_exclude", "bool"),
}


CONFIG_KEYS = tuple(_KEYS)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.streamcheck] table, as TOML reads it.

    Only files that mention "streamcheck" at all are parsed (every spelling of the table, `[tool."streamcheck"]`
    or `[tool] streamcheck = {...}`, contains the word); a file that mentions it but cannot be read or parsed is a
    ConfigError rather than a silent "no configuration".
    """
    start = Path(os.path.abspath(start))
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if not os.path.isfile(candidate):  # os.path: False, not PermissionError, for an unreadable folder
            continue
        try:
            data = candidate.read_bytes()
        except OSError as exc:
            raise ConfigError(str(candidate), "", f"cannot read {candidate}: {exc.strerror or exc}") from None
        if b"streamcheck" in data and _tool_table(candidate, data) is not None:
            return candidate
    return None


def load_config(config_file: Path | None, start: Path, overrides: dict[str, Any] | None = None) -> ScanConfig:
    """Read `config_file` (or the nearest pyproject.toml above `start`), then apply command-line overrides.

    `overrides` uses the file's key names ("extend-exclude", ...); None values are ignored. Raises ConfigError.
    """
    if config_file is None:
        config_file = find_pyproject(start)
        root = Path(os.path.abspath(config_file.parent if config_file else Path.cwd()))
    else:
        root = Path(os.path.abspath(config_file.parent))
    config = ScanConfig(root=root)
    if config_file is not None:
        table = _read_table(config_file)
        config = replace(_apply(config, table, str(config_file)), source=str(config_file))
    if overrides:
        config = _apply(config, {k: v for k, v in overrides.items() if v is not None}, "command line")
    return config


def _read_table(path: Path) -> dict[str, Any]:
    """[tool.streamcheck] of `path`; a file named with --config must have one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read {path}: {exc.strerror or exc}") from None
    table = _tool_table(path, data)
    if table is None:
        raise ConfigError(str(path), "", f"{path} has no [tool.streamcheck] table (is it the right file?)")
    return table


def _tool_table(path: Path, data: bytes) -> dict[str, Any] | None:
    """The [tool.streamcheck] table of a TOML document, None if it has none. Raises ConfigError for a file that
    is not UTF-8 or not TOML (also TOML too deeply nested to parse), naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError(str(path), "", f"cannot read {path}: reading TOML on Python 3.10 needs the 'tomli' "
                                             "package") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "", f"cannot read {path}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                                         f"{exc.start})") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", f"cannot read {path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(str(path), "", f"cannot read {path}: not valid TOML: nested too deeply to parse") from None
    tool = document.get("tool")
    if not isinstance(tool, dict) or "streamcheck" not in tool:
        return None
    table = tool["streamcheck"]
    if not isinstance(table, dict):
        raise ConfigError(str(path), "tool.streamcheck", "must be a table")
    return table


def _apply(config: ScanConfig, table: dict[str, Any], source: str) -> ScanConfig:
    changes: dict[str, Any] = {}
    for key, value in table.items():
        spec = _KEYS.get(key)
        if spec is None:
            hint = _close_key(key)
            raise ConfigError(source, key, "unknown option" + (f" (did you mean {hint!r}?)" if hint else "")
                              + f"; known: {', '.join(_KEYS)}")
        name, kind = spec
        changes[name] = _convert(source, key, kind, value)
    origins = [(o_source, o_key, code) for o_source, o_key, code in config.code_origins
               if _KEYS.get(o_key.split(".", 1)[0], ("",))[0] not in changes]  # a key given again replaces its codes
    for key in table:
        name = _KEYS[key][0]
        if name in ("select", "ignore"):
            origins += [(source, key, code) for code in changes[name]]
        elif name == "per_file_ignores":
            origins += [(source, f"{key}.{glob}", code) for glob, codes in changes[name] for code in codes]
    return replace(config, **changes, code_origins=tuple(origins))


def check_rule_codes(config: ScanConfig, known: set[str] | tuple[str, ...], runtime: tuple[str, ...] = ()) -> None:
    """Raise ConfigError for a code in select / ignore / per-file-ignores that is no scan rule's id or prefix.

    A typo must not switch checking off silently: `select = ["SC999"]` would otherwise report nothing and pass.
    `runtime` are the runtime detector's ids (SC2xx), named as such in the message.
    """
    known = set(known)
    for source, key, code in config.code_origins:
        if code == "ALL" or any(rule_id.startswith(code) for rule_id in known):
            continue
        valid = ", ".join(sorted(known))
        if any(rule_id.startswith(code) for rule_id in runtime):
            why = (f"{code} is a runtime rule (reported by `streamcheck run` and `streamcheck report`), not a scan "
                   f"rule; scan rules: {valid}")
        else:
            why = f"unknown rule id {code!r}; valid: {valid}, a prefix of them (e.g. 'SC1'), or ALL"
        raise ConfigError(source, key if source != "command line" else "--" + key.split(".", 1)[0], why)


def _convert(source: str, key: str, kind: str, value: Any) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(source, key, f"must be true or false, not {value!r}")
        return value
    if kind == "positive int":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(source, key, f"must be a positive integer, not {value!r}")
        return value
    if kind == "per-file":
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"must be a table of glob = [rule ids], not {type(value).__name__}")
        return tuple((str(glob), _convert(source, f"{key}.{glob}", "codes", codes)) for glob, codes in value.items())
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(source, key, f"must be a list of strings, not {value!r}")
    items = tuple(v.strip() for v in value if v.strip())
    if kind == "codes":
        bad = [v for v in items if v != "ALL" and not _looks_like_code(v)]
        if bad:
            listed = ", ".join(map(repr, bad))
            raise ConfigError(source, key, f"not a rule id or prefix: {listed} (e.g. 'SC101', 'SC1')")
        items = tuple(v.upper() for v in items)
    return items


def _looks_like_code(text: str) -> bool:
    text = text.upper()
    return text.startswith("SC") and text[2:].isdigit() and len(text) <= 5


def _close_key(key: str) -> str | None:
    import difflib

    match = difflib.get_close_matches(key.replace("_", "-"), list(_KEYS), n=1, cutoff=0.6)
    return match[0] if match else None


def split_csv(values: list[str] | None) -> list[str] | None:
    """Command-line lists: repeatable options whose values may also be comma-separated."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def parse_per_file_ignores(values: list[str] | None) -> dict[str, list[str]] | None:
    """`--per-file-ignores 'tests/*:SC101,SC102'` (repeatable) -> {glob: [codes]}."""
    if values is None:
        return None
    table: dict[str, list[str]] = {}
    for value in values:
        glob, sep, codes = value.rpartition(":")
        if not sep or not glob:
            raise ConfigError("command line", "--per-file-ignores", f"expected GLOB:CODES, got {value!r}")
        table.setdefault(glob, []).extend(c.strip() for c in codes.split(",") if c.strip())
    return table

