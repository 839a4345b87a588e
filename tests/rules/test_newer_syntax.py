"""Files in a grammar newer than the interpreter (PEP 695) are read through libcst, not reported as SC001."""

from __future__ import annotations

import sys
import textwrap

import pytest

from streamcheck.rules.facts import ParseFailure, extract_facts
from streamcheck.rules.options import StaticOptions

from static_helpers import findings_of, line_of

NEWER = textwrap.dedent("""
    import torch

    type Buffers = list[torch.Tensor]

    class Store[T]:
        def release[U](self, param, full):
            param.secondary_shard.copy_(full)

    def fetch[T](params, side):
        with torch.cuda.stream(side):
            return torch.cat([p.secondary_shard for p in params])
""")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the interpreter reads PEP 695 itself")
def test_pep695_file_is_parsed_and_its_race_found():
    [finding] = findings_of({"m.py": NEWER})
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", line_of(NEWER, ".copy_(full)"))
    assert finding.extra["reader_stream"] == "side"


def test_really_broken_file_is_still_a_parse_failure():
    with pytest.raises(ParseFailure) as failure:
        extract_facts("def f(:\n    pass\n", "broken.py", StaticOptions())
    assert failure.value.line == 1
