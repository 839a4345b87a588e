"""The engine's model of code outside the scan: inputs a side stream reads were made on the current stream
(outside_producers.py), results a side stream writes into what outlives the call are read on it (outside_consumers.py)."""

from __future__ import annotations

from static_helpers import findings_of, line_of

LOADER = """
    import torch

    class Loader:
        def __init__(self):
            self.stream = torch.cuda.Stream()

        def __call__(self, inputs, stage):
            {before}
            with torch.cuda.stream(self.stream):
                self.static[stage].copy_(torch.cat([inputs]))
            {after}
            return self.static[stage]
"""


def _found(source):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], f.extra["producer"], f.extra["consumer"])
            for f in findings_of({"m.py": source})]


def test_an_input_read_and_a_result_handed_out_on_a_side_stream_with_no_waits():
    racy = LOADER.format(before="pass", after="pass")
    line = line_of(racy, "self.static[stage].copy_")
    assert _found(racy) == [
        ("SC101", "RAW", line, "self.static", "device op", "outside"),  # read on the current stream after return
        ("SC101", "RAW", line, "inputs", "outside", "device op"),  # made on the current stream by the caller
    ]


def test_the_waits_in_both_directions_order_both():
    fixed = LOADER.format(before="self.stream.wait_stream(torch.cuda.current_stream())",
                          after="torch.cuda.current_stream().wait_stream(self.stream)")
    assert _found(fixed) == []


def test_a_stream_the_current_stream_waits_for_elsewhere_is_handed_over_there():
    source = LOADER.format(before="self.stream.wait_stream(torch.cuda.current_stream())", after="pass") + """
        def ready(self):
            torch.cuda.current_stream().wait_stream(self.stream)
    """
    assert _found(source) == []


def test_host_buffers_uploads_and_numbers_are_not_inputs_made_on_a_stream():
    source = """
        import torch

        def stage(batch, host_buf, scale, side):
            with torch.cuda.stream(side):
                dev = batch.to("cuda", non_blocking=True)
                dev.mul_(scale)
                out = torch.cat([host_buf])
            return dev, out
    """
    assert _found(source) == []


def test_an_attribute_holding_the_current_stream_orders_like_it_and_a_conditional_one_does_not():
    source = """
        import torch

        class Sampler:
            def __init__(self, overlap):
                self.main_stream = torch.cuda.current_stream()
                self.side = torch.cuda.Stream() if overlap else torch.cuda.default_stream()

            def broadcast(self, tokens):
                self.side.wait_stream(self.main_stream)
                with torch.cuda.stream(self.side):
                    return torch.cat([tokens])

            def gather(self, tokens):
                with torch.cuda.stream(self.side):
                    return torch.cat([tokens])
    """
    # `self.main_stream` is the current stream: the wait orders `broadcast`'s read; `self.side` is a side stream
    # (one arm of its conditional is), so `gather`'s read, with no wait, is reported.
    gather = line_of(source, "def gather") + 2
    assert [(line, path) for _, _, line, path, _, _ in _found(source)] == [(gather, "tokens")]
