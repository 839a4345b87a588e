"""SC107's hand-overs through callees: a call of a helper that agrees with the peers on the host (a blocking
collective on a host tensor read back with `.item()`, vLLM's `_all_ranks_true` / `tp_agree`) or reaches a host
barrier lets the peers go on at the call (cross_process.py); the fact behind it is
FunctionFacts.host_collectives (extract_host_collectives.py)."""

from __future__ import annotations

import json
import textwrap

from streamcheck.rules.facts import FileFacts, FunctionFacts

from static_helpers import facts_of, findings_of, line_of, summary_of

HEADER = """
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
"""

AGREE_CPU = """
def all_ranks_true(group, ok):
    flag = torch.tensor(int(ok), dtype=torch.int32, device="cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
"""

# vLLM's tp_agree: no device (a CPU factory), an early return for one rank.
AGREE_DEFAULT_DEVICE = """
def tp_agree(ok, group):
    if group is None:
        return ok
    flag = torch.tensor([int(ok)], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
"""

ARM = """
class Buffer:
    def __init__(self, n, group):
        self.group = group
        self.n = n

    def init_buffer(self):
        buffer = symm_mem.empty(self.n, dtype=torch.uint8, device="cuda")
        handle = None
        try:
            handle = symm_mem.rendezvous(buffer, self.group.group_name)
            if handle is not None:
                buffer[:64].zero_()
                {sync}
        except RuntimeError:
            pass
        if not {helper}(self.group, handle is not None):
            return
        self.buffer = buffer
        self.handle = handle
"""


def _source(helper_source: str, helper: str = "all_ranks_true", sync: str = "pass") -> str:
    return HEADER + helper_source + ARM.replace("{helper}", helper).replace("{sync}", sync)


def _sc107(source: str):
    return findings_of({"car.py": source}, {"SC107"})


def _facts(source: str, name: str) -> FunctionFacts:
    [file] = facts_of({"car.py": source})
    return next(fn for fn in file.functions if fn.name == name)


def test_a_helpers_cpu_all_reduce_read_with_item_hands_the_buffer_over():
    source = _source(AGREE_CPU)
    findings = _sc107(source)
    assert summary_of(findings) == [("SC107", "car.py", line_of(source, "buffer[:64].zero_()"), "RAW")]
    [related] = findings[0].related
    assert related.line == line_of(source, "if not all_ranks_true(")
    assert "`all_ranks_true(...)`" in findings[0].message
    assert "the host agreement `dist.all_reduce(...)` of `flag` in `all_ranks_true`" in findings[0].message


def test_a_synchronize_before_the_helper_call_orders_the_write():
    assert _sc107(_source(AGREE_CPU, sync="torch.cuda.synchronize()")) == []
    assert _sc107(_source(AGREE_CPU, sync="torch.accelerator.synchronize()")) == []


def test_a_factory_without_device_is_a_host_tensor_and_an_early_return_does_not_hide_the_agreement():
    source = _source(AGREE_DEFAULT_DEVICE, helper="tp_agree")
    assert summary_of(_sc107(source)) == [("SC107", "car.py", line_of(source, "buffer[:64].zero_()"), "RAW")]


def test_an_all_reduce_of_a_device_tensor_is_no_host_hand_over():
    source = _source(AGREE_CPU.replace('device="cpu"', 'device="cuda"'))
    assert _sc107(source) == []
    assert _facts(source, "all_ranks_true").host_collectives == []


def test_a_host_tensor_the_host_never_reads_back_is_no_agreement():
    source = _source(AGREE_CPU.replace("return bool(flag.item())", "return ok"))
    assert _sc107(source) == []
    assert _facts(source, "all_ranks_true").host_collectives == []


def test_an_async_all_reduce_is_no_agreement_at_the_call():
    source = _source(AGREE_CPU.replace("group=group)", "group=group, async_op=True)"))
    assert _facts(source, "all_ranks_true").host_collectives == []


def test_an_agreement_over_an_nccl_group_is_not_a_hand_over():
    source = _source(AGREE_CPU.replace("group=group)", "group=tp.device_group)"))
    assert _facts(source, "all_ranks_true").host_collectives != []  # the fact is there, the query leaves it
    assert _sc107(source) == []


def test_a_wrapper_of_the_helper_hands_over_too():
    wrapper = AGREE_DEFAULT_DEVICE + """
def agree(ok, group):
    return tp_agree(ok, group)
"""
    source = _source(wrapper, helper="agree")
    findings = _sc107(source)
    assert summary_of(findings) == [("SC107", "car.py", line_of(source, "buffer[:64].zero_()"), "RAW")]
    assert "in `tp_agree`" in findings[0].message


def test_a_helper_that_synchronizes_before_it_agrees_orders_the_write_itself():
    helper = AGREE_CPU.replace('    flag = torch', '    torch.cuda.synchronize()\n    flag = torch', 1)
    assert _sc107(_source(helper)) == []


def test_a_helper_reaching_a_host_barrier_hands_over():
    helper = """
def all_ranks_true(group, ok):
    dist.barrier(group=group)
    return ok
"""
    source = _source(helper)
    assert summary_of(_sc107(source)) == [("SC107", "car.py", line_of(source, "buffer[:64].zero_()"), "RAW")]
    nccl = helper.replace("dist.barrier(group=group)", "dist.barrier(group=group, device_ids=[0])")
    assert _sc107(_source(nccl)) == []


def test_a_helper_call_with_no_shared_write_before_it_is_nothing():
    source = _source(AGREE_CPU).replace("buffer[:64].zero_()", "pass")
    assert _sc107(source) == []


def test_the_fact_names_the_collective_and_its_host_tensor_and_survives_the_cache():
    source = _source(AGREE_CPU)
    facts = _facts(source, "all_ranks_true")
    line = line_of(source, "dist.all_reduce(flag")
    assert facts.host_collectives == [("dist.all_reduce", "flag", line, 5)]
    [file] = facts_of({"car.py": source})
    again = FileFacts.from_dict(json.loads(json.dumps(file.to_dict())))
    assert next(fn for fn in again.functions if fn.name == "all_ranks_true").host_collectives == \
        facts.host_collectives
    assert FunctionFacts.from_dict({"qualname": "f", "name": "f", "cls": None, "line": 1,
                                    "end_line": 2}).host_collectives == []


def test_a_broadcast_of_a_cpu_list_read_with_tolist_is_an_agreement():
    source = textwrap.dedent(HEADER + """
def share(values, group):
    t = torch.zeros(4, dtype=torch.int64)
    dist.broadcast(t, src=0, group=group)
    return t.tolist()
""")
    assert [row[:2] for row in _facts(source, "share").host_collectives] == [("dist.broadcast", "t")]


# --- NCCL through a local binding: `group = get_tp_group().device_group; dist.barrier(group=group)` -------------
MAILBOX = HEADER + """
def get_tp_group():
    return None

class Mailbox:
    def __init__(self, n, nccl):
        group = get_tp_group().device_group
        {rebind}
        self.box = symm_mem.empty(n, device="cuda")
        self.handle = symm_mem.rendezvous(self.box, group)
        self.box.view(torch.int16).fill_(-32768)
        dist.barrier(group=group)
"""


def test_a_barrier_over_a_local_bound_to_a_device_group_is_nccls():
    source = MAILBOX.replace("{rebind}", "pass")
    assert _sc107(source) == []
    line = line_of(source, "group = get_tp_group().device_group")
    assert _facts(source, "__init__").device_groups == [("group", line, 0)]


def test_a_local_bound_again_to_the_cpu_group_before_the_barrier_is_not():
    source = MAILBOX.replace("{rebind}", "group = get_tp_group().cpu_group")
    assert summary_of(_sc107(source)) == [("SC107", "car.py", line_of(source, ".fill_(-32768)"), "RAW")]
    first, again = line_of(source, ".device_group"), line_of(source, ".cpu_group")
    assert _facts(source, "__init__").device_groups == [("group", first, again)]


def test_a_device_group_bound_only_under_a_condition_the_barrier_is_outside_of_is_not_ncclss():
    source = MAILBOX.replace("        group = get_tp_group().device_group\n        {rebind}\n",
                             "        group = get_tp_group().cpu_group\n"
                             "        if nccl:\n"
                             "            group = get_tp_group().device_group\n")
    assert summary_of(_sc107(source)) == [("SC107", "car.py", line_of(source, ".fill_(-32768)"), "RAW")]


SELF_GROUP = HEADER + """
class Lamport:
    def __init__(self, n, tp):
        self.group = tp.device_group
        self.buf = symm_mem.empty(n, device="cuda")
        self.handle = symm_mem.rendezvous(self.buf, "tp")
{other}
    def arm(self):
        self.buf.fill_(0)
        dist.barrier(group=self.group)
"""


def test_a_barrier_over_an_attribute_every_method_binds_to_a_device_group_is_ncclss():
    assert _sc107(SELF_GROUP.replace("{other}", "")) == []


def test_an_attribute_another_method_binds_to_the_cpu_group_is_not():
    source = SELF_GROUP.replace("{other}", "    def to_cpu(self, tp):\n        self.group = tp.cpu_group\n")
    assert summary_of(_sc107(source)) == [("SC107", "car.py", line_of(source, "self.buf.fill_(0)"), "RAW")]


def test_a_helpers_agreement_over_a_local_device_group_is_no_hand_over():
    helper = AGREE_CPU.replace("    flag = torch", "    group = get_tp_group().device_group\n    flag = torch", 1)
    assert _sc107(_source(helper)) == []
