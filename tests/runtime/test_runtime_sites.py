"""Call sites (instrument/sites.py): blamed on the first frame outside torch/streamcheck, told apart by their chain."""

from __future__ import annotations

import torch

from streamcheck.instrument.sites import UNKNOWN_SITE, SiteTable

table = SiteTable(depth=4)


def communication_wrapper():
    return table.capture(1)  # like deepspeed/comm: every all-gather passes here


def layer_between():
    return communication_wrapper()


def racy_path():
    return layer_between()


def harmless_path():
    return layer_between()


def test_paths_through_the_same_wrappers_are_different_sites():
    racy, harmless = racy_path(), harmless_path()
    assert racy != harmless
    assert len({racy_path() for _ in range(3)}) == 1  # interned: the same chain is the same site
    assert [f[2] for f in table.frames(racy)] == ["communication_wrapper", "layer_between", "racy_path",
                                                  "test_paths_through_the_same_wrappers_are_different_sites"]
    assert table.frames(harmless)[2][2] == "harmless_path"


def test_torch_frames_are_skipped_when_blaming():
    sites = []
    tensor = torch.ones(2, requires_grad=True)
    tensor.register_hook(lambda grad: sites.append(table.capture(1)))
    tensor.sum().backward()
    frames = table.frames(sites[0])
    assert frames[0][0] == __file__ and frames[0][2] == "<lambda>"


def test_unknown_sites_have_no_frames():
    assert table.frames(UNKNOWN_SITE) == [] and table.frames(10**6) == []
