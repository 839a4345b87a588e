"""A batch kept in an attribute of `self` between the methods of a pipeline (torchrec 1.9.2's TrainPipelineBase):
one method fills it with a helper's asynchronous copy inside the memcpy stream's region, the next call of
`progress` takes it under a local name, hands it to a helper that waits for the memcpy stream and records the
current stream on it, then to the model. Each capability it needs, by its own test: the helper's result written on
the caller's stream (call_values.py, FunctionFacts.made_results and Call.true_args), the local that names the
attribute read by the module it is handed to (FunctionFacts.attribute_names), the method that calls a module
function of its own name (callgraph.py), and the refilled attribute's lifetime (refilled_attributes.py)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

PIPELINE = """
    import torch


    def _to_device(batch, device, non_blocking):
        return batch.to(device=device, non_blocking=non_blocking)


    def _wait_for_batch(batch, stream):
        cur = torch.cuda.current_stream()
        {wait}
        {record}


    class Pipeline:
        def __init__(self, model):
            self._model = model
            self._memcpy_stream = torch.cuda.Stream()

        def _copy_batch_to_gpu(self, batch):
            with torch.cuda.stream(self._memcpy_stream):
                self._cur_batch = _to_device(batch, "cuda", non_blocking={flag})

        def _wait_for_batch(self, batch):
            _wait_for_batch(batch, self._memcpy_stream)

        def progress(self, it):
            cur_batch = self._cur_batch
            self._wait_for_batch(cur_batch)
            out = self._model(cur_batch)
            self._cur_batch = cur_batch = next(it)
            self._copy_batch_to_gpu(cur_batch)
            return out
"""
WAIT = "cur.wait_stream(stream)"
RECORD = "batch.record_stream(cur)"


def _source(wait: str = WAIT, record: str = RECORD, flag: str = "True") -> str:
    return PIPELINE.format(wait=wait, record=record, flag=flag)


def _found(source: str):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], [(r.role, r.line) for r in f.related])
            for f in findings_of({"pipeline.py": source})]


def test_the_pipeline_that_waits_and_records_in_its_helper():
    assert _found(_source()) == []


def test_no_wait_for_the_memcpy_stream_before_the_model_reads_the_batch():
    source = _source(wait="pass")
    copy = line_of(source, "self._cur_batch = _to_device(")
    assert _found(source) == [
        ("SC101", "RAW", copy, "self._cur_batch",
         [("read", line_of(source, "out = self._model(cur_batch)")),
          ("stream context", line_of(source, "with torch.cuda.stream(self._memcpy_stream):"))]),
    ]


def test_no_record_of_the_current_stream_on_the_batch_it_takes_over():
    source = _source(record="pass")
    [finding] = findings_of({"pipeline.py": source})
    assert (finding.rule, finding.kind, finding.primary.line, finding.extra["path"], finding.extra["stream"]) == (
        "SC104", "FREE", line_of(source, "out = self._model(cur_batch)"), "self._cur_batch", "self._memcpy_stream")
    assert [(r.role, r.line) for r in finding.related] == [
        ("write", line_of(source, "self._cur_batch = _to_device(")),
        ("stream context", line_of(source, "with torch.cuda.stream(self._memcpy_stream):"))]


def test_a_blocking_copy_by_the_helper_leaves_nothing_behind():
    # non_blocking=False: the host waits for the copy, later launches of any stream follow it
    assert _found(_source(wait="pass", record="pass", flag="False")) == []


def test_the_memcpy_stream_waiting_for_the_current_stream_before_each_fill():
    # the next fill's allocation is ordered after the current stream's reads: no record needed
    source = _source(record="pass").replace(
        "            with torch.cuda.stream(self._memcpy_stream):\n",
        "            self._memcpy_stream.wait_stream(torch.cuda.current_stream())\n"
        "            with torch.cuda.stream(self._memcpy_stream):\n")
    assert _found(source) == []


def test_a_method_calls_the_module_function_of_its_own_name():
    program = program_of({"pipeline.py": _source()})
    [(call, edges)] = [(c, e) for c, e in program.calls_of("pipeline.py::Pipeline._wait_for_batch")
                       if c.callee == "_wait_for_batch"]
    assert [(e.callee, e.exact) for e in edges] == [("pipeline.py::_wait_for_batch", True)]


def test_the_attribute_names_of_a_local_end_where_it_is_bound_again():
    [facts] = [f for f in program_of({"pipeline.py": _source()}).functions.values()
               if f.facts.qualname == "Pipeline.progress"]
    source = _source()
    assert facts.facts.attribute_names == [
        ("cur_batch", "self._cur_batch", line_of(source, "cur_batch = self._cur_batch")),
        ("cur_batch", "", line_of(source, "self._cur_batch = cur_batch = next(it)"))]


TRANSFER = """
    import torch


    def transfer(tensors, side):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = {{}}
            for k, v in tensors.items():
                dst = torch.empty(v.shape, dtype=v.dtype, device="cpu", pin_memory=True)
                dst.copy_(v, non_blocking=True)
                out[k] = dst
            event = torch.cuda.Event()
            event.record()
        return out, event


    class Metrics:
        def update(self, other, side):
            cpu, event = transfer(other, side)
            {caller}
"""


def _transfer_findings(caller: str):
    source = TRANSFER.format(caller=caller)
    return source, [(f.rule, f.kind, f.primary.line, f.extra["path"]) for f in findings_of({"metrics.py": source})
                    if f.rule == "SC104"]


def test_a_caller_that_synchronizes_in_one_arm_only():
    # the other arm hands the event to a callback that runs later: the caller may drop `other` at once
    source, found = _transfer_findings(
        "if self.resolved:\n                event.synchronize()\n"
        "            else:\n                self.pending.append((cpu, event))")
    assert found == [("SC104", "FREE", line_of(source, "return out, event"), "v")]


def test_a_caller_that_synchronizes_on_every_way():
    for caller in ("event.synchronize()",
                   "if event is not None:\n                event.synchronize()",
                   "if self.resolved:\n                event.synchronize()\n"
                   "            else:\n                torch.cuda.current_stream().wait_event(event)"):
        assert _transfer_findings(caller)[1] == [], caller


def test_a_conditional_call_waited_for_in_one_arm_keeps_the_lenient_reading():
    # vLLM's sparse MLA prefill: the gather runs `if uses_host_cache`, and its event is waited `if uses_host_cache`
    source = TRANSFER.replace(
        "            cpu, event = transfer(other, side)\n",
        "            if self.host_cache:\n                cpu, event = transfer(other, side)\n")
    source = source.format(caller="if self.host_cache:\n                event.synchronize()\n"
                                   "            else:\n                self.pending.append(other)")
    assert [f for f in findings_of({"metrics.py": source}) if f.rule == "SC104"] == []
