"""[tool.streamcheck] and the same options on the command line: what each selects, and exit 2 on bad input."""

from __future__ import annotations

import pytest

from streamcheck.scanner.config import ConfigError, load_config

from .helpers import positions, scan_cli, scan_json, write_tree

COPY = """
def f(x, y):
    x.copy_(y)
"""
FREE = """
def g(x):
    x.free_()
"""


@pytest.fixture
def project(tmp_path, monkeypatch, fake_backend):
    write_tree(tmp_path, {"pkg/a.py": COPY, "pkg/b.py": FREE, "tests/test_a.py": COPY, "gen/out.py": COPY})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _pyproject(root, body: str) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.streamcheck]\n" + body, encoding="utf-8")


def test_without_config_every_rule_and_file(project, capsys):
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    assert positions(doc) == [("SC101", "gen/out.py", 2, 5), ("SC101", "pkg/a.py", 2, 5),
                              ("SC104", "pkg/b.py", 2, 5), ("SC101", "tests/test_a.py", 2, 5)]


def test_select_ignore_per_file_ignores_extend_exclude_from_pyproject(project, capsys):
    _pyproject(project, 'select = ["SC1"]\nignore = ["SC104"]\nextend-exclude = ["gen"]\n'
                        'per-file-ignores = { "tests/*" = ["SC101"] }\n')
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    assert positions(doc) == [("SC101", "pkg/a.py", 2, 5)]


def test_command_line_overrides_the_file(project, capsys):
    _pyproject(project, 'select = ["SC101"]\n')
    code, doc, _ = scan_json(capsys, "--no-cache", "--select", "SC104", ".")
    assert code == 1
    assert positions(doc) == [("SC104", "pkg/b.py", 2, 5)]


def test_command_line_per_file_ignores_and_excludes(project, capsys):
    code, doc, _ = scan_json(capsys, "--no-cache", "--per-file-ignores", "pkg/*:SC104", "--extend-exclude",
                             "gen,tests", ".")
    assert code == 1
    assert positions(doc) == [("SC101", "pkg/a.py", 2, 5)]


def test_exclude_replaces_the_defaults(project, capsys):
    write_tree(project, {"build/x.py": COPY, ".cache/y.py": COPY, ".venv/z.py": COPY})
    code, doc, _ = scan_json(capsys, "--no-cache", "--exclude", "pkg,tests,gen", ".")
    assert positions(doc) == [("SC101", ".cache/y.py", 2, 5), ("SC101", ".venv/z.py", 2, 5),
                              ("SC101", "build/x.py", 2, 5)]
    code, doc, _ = scan_json(capsys, "--no-cache", "--extend-exclude", "pkg,tests,gen", ".")
    assert code == 0 and doc["findings"] == []  # build/, .cache/ and .venv/ are in the default excludes


def test_a_folder_named_on_purpose_is_scanned_inside_an_excluded_one(project, capsys):
    write_tree(project, {".venv/lib/site-packages/dep/m.py": COPY})
    code, doc, _ = scan_json(capsys, "--no-cache", ".venv/lib/site-packages/dep")
    assert positions(doc) == [("SC101", ".venv/lib/site-packages/dep/m.py", 2, 5)]


def test_explicit_files_obey_excludes_with_force_exclude(project, capsys):
    _pyproject(project, 'extend-exclude = ["gen"]\n')
    code, doc, _ = scan_json(capsys, "--no-cache", "--force-exclude", "gen/out.py", "pkg/a.py")
    assert positions(doc) == [("SC101", "pkg/a.py", 2, 5)]
    # Without it a file named on purpose is scanned even inside an excluded folder (as ruff does).
    code, doc, _ = scan_json(capsys, "--no-cache", "gen/out.py", "pkg/a.py")
    assert positions(doc) == [("SC101", "gen/out.py", 2, 5), ("SC101", "pkg/a.py", 2, 5)]


def test_model_options_reach_the_rules_options(project):
    _pyproject(project, 'stream-contexts = ["my_accel.side"]\ncollectives = ["my_comm.gather_into"]\n'
                        'sync-callables = ["my_accel.fence"]\ngeneric-attributes = ["payload"]\n')
    config = load_config(None, project, {"collectives": ["other.bcast"]})
    assert config.stream_contexts == ("my_accel.side",)
    assert config.collectives == ("other.bcast",)  # the command line replaces the file's list
    options = config.static_options()
    assert options.stream_contexts == ("my_accel.side",)
    assert options.collectives == ("other.bcast",)
    assert options.sync_callables == ("my_accel.fence",)
    assert options.generic_attributes == ("payload",)


@pytest.mark.parametrize("body, key, words", [
    ('selekt = ["SC101"]\n', "selekt", "unknown option (did you mean 'select'?)"),
    ('select = "SC101x"\n', "select", "not a rule id or prefix: 'SC101x'"),
    ('exclude = 3\n', "exclude", "must be a list of strings, not 3"),
    ('max-file-size-kb = "big"\n', "max-file-size-kb", "must be a positive integer, not 'big'"),
    ('per-file-ignores = ["tests/*"]\n', "per-file-ignores", "must be a table of glob = [rule ids]"),
    ('per-file-ignores = { "tests/*" = [1] }\n', "per-file-ignores.tests/*", "must be a list of strings"),
])
def test_bad_config_exits_2_naming_key_and_file(project, capsys, body, key, words):
    _pyproject(project, body)
    code, out, err = scan_cli(capsys, "--no-cache", ".")
    assert code == 2
    assert out == ""
    assert err.startswith(f"streamcheck scan: {project / 'pyproject.toml'}: [tool.streamcheck] {key}: {words}")
    assert "Traceback" not in err


def test_invalid_toml_exits_2(project, capsys):
    (project / "pyproject.toml").write_text("[tool.streamcheck]\nselect = [\n", encoding="utf-8")
    code, _, err = scan_cli(capsys, ".")
    assert code == 2
    assert err.startswith(f"streamcheck scan: cannot read {project / 'pyproject.toml'}: not valid TOML: ")


def test_bad_command_line_values_exit_2(project, capsys):
    assert scan_cli(capsys, "--select", "XYZ", ".")[0:3:2] == (
        2, "streamcheck scan: command line: select: not a rule id or prefix: 'XYZ' (e.g. 'SC101', 'SC1')\n")
    assert scan_cli(capsys, "--per-file-ignores", "SC101", ".")[0:3:2] == (
        2, "streamcheck scan: command line: --per-file-ignores: expected GLOB:CODES, got 'SC101'\n")
    assert scan_cli(capsys, "--config", "nope.toml", ".")[0:3:2] == (
        2, "streamcheck scan: cannot read nope.toml (--config): no such file\n")
    assert scan_cli(capsys, "--jobs", "0", ".")[0:3:2] == (
        2, "streamcheck scan: command line: --jobs: must be at least 1\n")
    assert scan_cli(capsys, "missing_dir")[0:3:2] == (
        2, "streamcheck scan: missing_dir: no such file or folder\n")


def test_config_file_option_and_nearest_pyproject(project, capsys, tmp_path_factory):
    other = tmp_path_factory.mktemp("cfg") / "pyproject.toml"
    other.write_text('[tool.streamcheck]\nselect = ["SC104"]\n', encoding="utf-8")
    code, doc, _ = scan_json(capsys, "--no-cache", "--config", str(other), "pkg")
    assert positions(doc) == [("SC104", "pkg/b.py", 2, 5)]
    # Without --config the nearest pyproject.toml above the scanned paths with a [tool.streamcheck] table counts.
    _pyproject(project / "pkg", 'ignore = ["SC104"]\n')
    code, doc, _ = scan_json(capsys, "--no-cache", "pkg")
    assert positions(doc) == [("SC101", "pkg/a.py", 2, 5)]


def test_config_error_carries_key_and_source():
    with pytest.raises(ConfigError) as info:
        load_config(None, ".", {"ignore": ["nope"]})
    assert (info.value.source, info.value.key) == ("command line", "ignore")
