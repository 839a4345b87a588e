"""Hook bodies run on the invoker's stream (rules/hooks.py): which functions count as hooks, and what changes there."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

from streamcheck.rules.hooks import hook_run_functions, is_hook_registrar

# DeepSpeed ZeRO-3's shape: a nested function handed to a registrar helper, calling a method that does the copy.
ZERO3 = """
    import torch
    from deepspeed.utils import register_grad_hook

    class Optimizer:
        def create_hooks(self, params):
            for param in params:
                def reduce_partition_and_remove_grads(*notneeded):
                    self.reduce_ready(param)
                register_grad_hook(param, reduce_partition_and_remove_grads)

        def reduce_ready(self, param):
            self.add_to_bucket(param)

        def add_to_bucket(self, param):
            self.reduce_stream.wait_stream(torch.cuda.{waited}())
            with torch.cuda.stream(self.reduce_stream):
                self.bucket.copy_(param.grad.view(-1), non_blocking=True)

        def step(self):
            torch.cuda.current_stream().wait_stream(self.reduce_stream)

        def unrelated(self, param):
            self.reduce_stream.wait_stream(torch.cuda.default_stream())
"""


def test_registrars_by_name():
    assert [is_hook_registrar(c) for c in (
        "param.register_hook", "p.register_post_accumulate_grad_hook", "register_grad_hook",
        "module.register_forward_pre_hook", "Variable._execution_engine.queue_callback",
        "torch.autograd.graph.saved_tensors_hooks", "self.register_buffer", "hook", "self.registry.add")] == [
        True, True, True, True, True, True, False, False, False]


def test_the_nested_hook_and_what_it_calls_exactly_run_as_hooks():
    program = program_of({"opt.py": ZERO3.format(waited="default_stream")})
    assert sorted(fid.split("::")[1] for fid in hook_run_functions(program)) == [
        "Optimizer.add_to_bucket", "Optimizer.create_hooks.reduce_partition_and_remove_grads",
        "Optimizer.reduce_ready"]


def test_a_wait_for_the_default_stream_inside_the_hook_orders_nothing():
    racy = ZERO3.format(waited="default_stream")
    [finding] = findings_of({"opt.py": racy})
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", line_of(racy, "self.bucket.copy_"))
    assert (finding.extra["producer"], finding.extra["reader_stream"]) == ("autograd", "self.reduce_stream")
    assert findings_of({"opt.py": ZERO3.format(waited="current_stream")}) == []
