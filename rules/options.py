"""What a user can tell the static half about their code base: extra stream contexts, collectives and syncs.

Every name is matched against the last dotted segment of a call (`get_accelerator().stream(s)` matches "stream")
or, when the configured name is dotted, against the end of the call's dotted text (`my_lib.side_stream`).
Options change the facts a file yields, so `cache_key()` is part of the facts cache key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

# Calls whose result, used in a `with`, makes the body run on another stream.
DEFAULT_STREAM_CONTEXTS = ("stream", "StreamContext", "stream_context", "_stream_context")  # torchrec's helpers too

# Calls that hand tensors to a communication library (a consumer that runs on its own stream).
DEFAULT_COLLECTIVES = (
    "all_gather", "all_gather_into_tensor", "all_gather_single", "_all_gather_base", "all_gather_coalesced",
    "allgather_fn", "all_reduce", "all_reduce_coalesced", "allreduce_fn", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single", "_reduce_scatter_base", "reduce_scatter_fn", "reduce_scatter_coalesced", "broadcast", "reduce",
    "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "gather", "scatter",
)

# Calls that block the host until device work is done (besides `.synchronize()`, which is always one).
DEFAULT_SYNC_CALLABLES = ("synchronize",)

# Attribute names so common on tensors and modules that a write to `a.data` and a read of `b.data` say nothing
# about `a` and `b` being the same tensor. Paths ending in one of these only match when rooted in the same
# `self` class or the same local variable.
DEFAULT_GENERIC_ATTRIBUTES = (
    "data", "grad", "weight", "bias", "main_grad", "tensor", "tensors", "buffer", "buffers", "buf", "param",
    "params", "output", "outputs", "input", "inputs", "value", "values", "state", "module", "out", "result",
    "x", "y", "t", "hidden_states", "cache", "mask", "scale", "scales",
)


@dataclass(frozen=True)
class StaticOptions:
    """Extra names on top of the defaults above; tuples so the options hash and compare by value."""

    stream_contexts: tuple[str, ...] = ()
    collectives: tuple[str, ...] = ()
    sync_callables: tuple[str, ...] = ()  # the `sync-callables` key of [tool.streamcheck]
    generic_attributes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Accept lists from config files; store sorted tuples so equal options have equal keys.
        for f in fields(self):
            object.__setattr__(self, f.name, tuple(sorted(set(getattr(self, f.name)))))

    @property
    def all_stream_contexts(self) -> frozenset[str]:
        return frozenset(DEFAULT_STREAM_CONTEXTS + self.stream_contexts)

    @property
    def all_collectives(self) -> frozenset[str]:
        return frozenset(DEFAULT_COLLECTIVES + self.collectives)

    @property
    def all_sync_callables(self) -> frozenset[str]:
        return frozenset(DEFAULT_SYNC_CALLABLES + self.sync_callables)

    @property
    def all_generic_attributes(self) -> frozenset[str]:
        return frozenset(DEFAULT_GENERIC_ATTRIBUTES + self.generic_attributes)

    def cache_key(self) -> str:
        """A short stable digest of everything that can change the facts of a file."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def matches_name(dotted: str, names: frozenset[str]) -> bool:
    """Whether a call's dotted text (`torch.cuda.stream`, `get_accelerator().stream`) is one of `names`."""
    last = dotted.rsplit(".", 1)[-1]
    if last in names:
        return True
    with_dots = _WITH_DOTS.get(names)
    if with_dots is None:  # (the facts pass asks about every call: 1.2 % of its time went to looking for dots)
        dots = [name for name in names if "." in name]
        with_dots = _WITH_DOTS[names] = (frozenset(dots), tuple("." + name for name in dots))
    return dotted in with_dots[0] or dotted.endswith(with_dots[1])  # (one test for all suffixes, no generator)


# a set of names -> (those of them with a dot, the same each after a dot: the ends of a longer dotted text)
_WITH_DOTS: dict[frozenset[str], tuple[frozenset[str], tuple[str, ...]]] = {}
