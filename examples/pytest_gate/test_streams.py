"""`pytest --streamcheck` as a CI gate: one racy test, one clean test (needs a CUDA device).

    pytest --streamcheck examples/pytest_gate/test_streams.py

fails `test_side_stream_reads_before_the_fill_is_ordered` with an SC201 RAW report that points at the read (marked
`streamcheck: race`) and the write (marked `streamcheck: earlier`), and passes `test_side_stream_waits_for_the_fill`.
Without --streamcheck both pass: the race is real but rarely corrupts anything, which is why it needs a detector.
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

N = 1 << 20


def test_side_stream_reads_before_the_fill_is_ordered():
    side = torch.cuda.Stream()
    x = torch.empty(N, device="cuda")
    x.fill_(1.0)  # streamcheck: earlier
    with torch.cuda.stream(side):
        y = x * 2  # streamcheck: race (side never waited for the compute stream)
    torch.cuda.synchronize()
    del y  # whether it holds 2.0 everywhere depends on timing: that is the race


def test_side_stream_waits_for_the_fill():
    side = torch.cuda.Stream()
    x = torch.empty(N, device="cuda")
    x.fill_(1.0)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    assert y.sum().item() == 2.0 * N
