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


LIBRARY = "/opt/some_library/"
_LIBRARY_SOURCE = """
def library_entry(table, out):
    out.append(library_inner(table))

def library_inner(table):
    return table.capture(1)
"""


def test_a_stack_without_program_frames_blames_the_innermost_library_frame_and_says_so():
    """A library thread (the DataLoader's pin-memory thread, FSDP's hooks): every frame is internal."""
    import threading

    namespace: dict = {}
    exec(compile(_LIBRARY_SOURCE, LIBRARY + "worker.py", "exec"), namespace)
    library_table = SiteTable(depth=4, extra_internal=(LIBRARY,))
    found: list = []
    thread = threading.Thread(target=namespace["library_entry"], args=(library_table, found))  # no test frame
    thread.start()
    thread.join()
    (site,) = found
    frames = library_table.frames(site)
    assert frames[0][:2] == [LIBRARY + "worker.py", 6]
    assert frames[0][2] == "library_inner [innermost library frame: no frame of the program on the stack]"
    assert frames[1][:3] == [LIBRARY + "worker.py", 3, "library_entry"]
    assert library_table.is_library_site(site)
    assert not library_table.is_library_site(racy_path())


def test_an_access_with_no_python_frame_during_backward_is_blamed_on_the_backward_call():
    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.recorder import Recorder
    from streamcheck.instrument.sites import BACKWARD_NOTE

    detector = Detector()
    rec = Recorder(detector)

    def engine_run_backward():  # the wrapper instrument/threads.py installs, called by the program's backward()
        rec.backward_begin()

    engine_run_backward()
    line = __import__("inspect").currentframe().f_lineno - 1
    rec.emit_access("T1", "cuda:0/s0", [], [(1, 0, 8)], -1, "c10d::allreduce_", None, None)  # the reducer, in C++
    rec.backward_end()
    rec.emit_access("T1", "cuda:0/s1", [], [(1, 0, 8)], -1, "aten::add_", None, None)  # after: unknown again
    (race,) = detector.races
    frames = rec.sites.frames(race.earlier.site)
    assert frames[0] == [__file__, line, "test_an_access_with_no_python_frame_during_backward_is_blamed_on_the_"
                         "backward_call" + BACKWARD_NOTE]
    assert race.later.site == -1


def test_an_access_with_only_library_frames_during_backward_is_blamed_on_the_backward_call():
    """The autograd engine's thread on CUDA runs an op under torch's own wrappers only (the mode backend sees
    those frames): during backward() the report names the backward() call, as for an access with no frame."""
    import threading

    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.recorder import Recorder
    from streamcheck.instrument.sites import BACKWARD_NOTE

    namespace: dict = {}
    exec(compile(_LIBRARY_SOURCE, LIBRARY + "worker.py", "exec"), namespace)
    detector = Detector()
    rec = Recorder(detector)
    rec.sites = SiteTable(depth=4, extra_internal=(LIBRARY,))
    found: list = []
    thread = threading.Thread(target=namespace["library_entry"], args=(rec.sites, found))  # no test frame
    thread.start()
    thread.join()
    (library_site,) = found
    assert rec.sites.is_library_site(library_site)

    def engine_run_backward():
        rec.backward_begin()

    engine_run_backward()
    line = __import__("inspect").currentframe().f_lineno - 1
    rec.emit_access("T1", "cuda:0/s0", [], [(1, 0, 8)], library_site, "aten::mul", None, None)
    rec.backward_end()
    rec.emit_access("T1", "cuda:0/s1", [], [(1, 0, 8)], library_site, "aten::add_", None, None)  # after: as it is
    (race,) = detector.races
    assert rec.sites.frames(race.earlier.site)[0] == [
        __file__, line, "test_an_access_with_only_library_frames_during_backward_is_blamed_on_the_backward_call"
        + BACKWARD_NOTE]
    assert race.later.site == library_site
