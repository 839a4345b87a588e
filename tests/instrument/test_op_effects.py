"""The op-effects file (instrument/op_effects.json), the op knowledge op_table.py loads for both backends: the
packaged file is well-formed, a malformed one stops with a message that names the entry, every op it names is an
operator of torch, and a wheel carries it where the installed package reads it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from streamcheck.instrument import op_table
from streamcheck.instrument.op_table import OpEffectsError, check_effects, load_effects

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "instrument" / "op_effects.json"


def _doc() -> dict:
    return json.loads(SOURCE.read_text(encoding="utf-8"))


def test_the_packaged_file_is_well_formed_and_is_what_op_table_reads():
    assert Path(op_table.effects_path()).read_bytes() == SOURCE.read_bytes()
    check_effects(_doc())
    assert load_effects(SOURCE.read_text(encoding="utf-8")) == op_table.EFFECTS
    effects = op_table.EFFECTS
    assert (len(op_table.METADATA_ONLY_OPS), len(op_table.DATA_QUERIES), sorted(op_table.METADATA_ARGUMENTS)) == (
        23, 32, ["aten::align_as", "aten::expand_as", "aten::reshape_as", "aten::to", "aten::type_as", "aten::view_as"])
    assert (effects.op_kinds["aten::record_stream"], effects.namespace_kinds) == ("record_stream", {"c10d": "collective"})


def test_every_op_the_file_names_is_an_operator_of_torch():
    known = set(torch._C._dispatch_get_all_op_names()) | {s.name for s in torch._C._jit_get_all_schemas()}
    # torch 2.13 (CI's) registers no aten op for the named-tensor methods align_as and rename_, nor an is_nonzero_:
    # entries kept from the hand-written table for the older torch releases streamcheck supports
    assert sorted(op for op in _doc()["ops"] if op not in known) == ["aten::align_as", "aten::is_nonzero_",
                                                                     "aten::rename_"]


def _set(section: str, key: str, value):
    return lambda doc: doc[section].__setitem__(key, value)


@pytest.mark.parametrize("change, message", [
    (lambda doc: doc["ops"]["aten::set_"].update(effect="metdata_only"),
     "ops['aten::set_']: effect 'metdata_only' is not one of collective, data_query, metadata_only, record_stream"),
    (lambda doc: doc["ops"]["aten::view_as"].update(metadata_arguments="other"),
     "ops['aten::view_as']: metadata_arguments must be a non-empty list of argument names, not 'other'"),
    (lambda doc: doc["ops"]["aten::set_"].update(metadata_arguments=["self"]),
     "ops['aten::set_']: metadata_arguments mean nothing for an op whose effect is metadata_only"),
    (_set("ops", "view_as", {"metadata_arguments": ["other"]}),
     "ops['view_as']: not a qualified operator name (namespace::name)"),
    (_set("ops", "c10d::barrier", {"effect": "metadata_only"}),
     "ops['c10d::barrier']: the namespace c10d is decided by namespaces; this entry would never be read"),
    (_set("ops", "aten::item", {"efect": "data_query"}),
     "ops['aten::item']: unknown key 'efect' (an entry has effect and/or metadata_arguments)"),
    (_set("ops", "aten::item", {}), "ops['aten::item']: must be an object with effect and/or metadata_arguments"),
    (_set("namespaces", "c10d", "data_query"),
     "namespaces['c10d']: effect 'data_query' is not one of collective, metadata_only, record_stream"),
    (_set("effects", "frees", "an op that frees its input"),
     "effects: must describe exactly the effects this streamcheck knows: collective, data_query, metadata_only, "
     "record_stream"),
    (_set("factory_like", "prefixes", "new_"), "factory_like.prefixes: must be a list of non-empty strings"),
    (_set("query_return_types", "types", ["int", "int"]),
     "query_return_types: must have about and types (a non-empty list of distinct type names)"),
    (lambda doc: doc.__setitem__("version", 2), "version: 2 is not 1 (the one this streamcheck reads)"),
    (lambda doc: doc.pop("ops"), "top level: lacks 'ops'"),
], ids=["effect", "arguments", "arguments-of-skipped", "name", "namespace", "key", "empty", "namespace-effect",
        "new-effect", "prefixes", "types", "version", "section"])
def test_a_malformed_entry_is_named(change, message):
    doc = _doc()
    change(doc)
    with pytest.raises(OpEffectsError) as raised:
        check_effects(doc)
    assert str(raised.value) == "op_effects.json: " + message


def test_an_op_listed_twice_and_broken_json_are_named():
    text = SOURCE.read_text(encoding="utf-8")
    entry = '    "aten::set_": {"effect": "metadata_only"},\n'
    assert entry in text
    with pytest.raises(OpEffectsError) as raised:
        load_effects(text.replace(entry, entry * 2))
    assert str(raised.value) == "op_effects.json: 'aten::set_' is listed twice"
    with pytest.raises(OpEffectsError) as raised:
        load_effects(text.replace('"version": 1,', '"version": 1', 1))
    assert str(raised.value) == "op_effects.json: line 4 column 3: Expecting ',' delimiter"


@pytest.mark.network
def test_a_wheel_carries_the_file_and_the_installed_package_reads_it(tmp_path):
    """Built as tests/core/test_cli_habits.py builds its wheel: offline with the installed setuptools when it is new
    enough, else pip fetches the one pyproject asks for."""
    try:
        import setuptools

        offline = int(setuptools.__version__.split(".")[0]) >= 77
    except ImportError:
        offline = False
    isolation = ["--no-build-isolation"] if offline else []
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w",
                            str(tmp_path / "w"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "w").glob("streamcheck-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("streamcheck/instrument/op_effects.json") == SOURCE.read_bytes()
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                                str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from streamcheck.instrument import op_table; "
             "print(op_table.__file__); print(op_table.effects_path()); "
             "print(op_table.roles_of_name('aten::view_as', ''))")
    done = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(site / "streamcheck" / "instrument" / "op_table.py"),
                                        str(site / "streamcheck" / "instrument" / "op_effects.json"),
                                        "('skip', ('view', 'none'), ('view',))"]
