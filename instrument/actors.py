"""Actors, the things that have a vector clock: host threads, device streams, NCCL streams. Torch-free.

On the detector's hot path an actor is a plain string (a dict key); this module is the one place that writes and
reads those strings:

    "T<ident>"           a host thread (its Python thread ident)
    "cuda:<dev>/s<id>"   a device stream: its index on the device (0 is the default, "compute" stream) or handle
    "nccl:<pg>/<dev>"    the NCCL stream of process group <pg> on device <dev>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

HOST, STREAM, NCCL, OTHER = "host", "stream", "nccl", "other"
_STREAM = re.compile(r"^cuda:(\d+)/s(\d+)$")
_NCCL = re.compile(r"^nccl:(.+)/(\d+)$")


@dataclass(frozen=True)
class Actor:
    kind: str  # HOST, STREAM, NCCL or OTHER (a string this module did not write; kept as `text`)
    text: str
    device: int | None = None
    stream: int = 0  # STREAM: the stream's id on its device
    group: str = ""  # NCCL: the process group

    @property
    def is_host(self) -> bool:
        return self.kind == HOST

    @property
    def is_default_stream(self) -> bool:
        return self.kind == STREAM and self.stream == 0

    def __str__(self) -> str:
        return self.text


def host(ident: int | str) -> str:
    return f"T{ident}"


def cuda_stream(device: int, stream: int) -> str:
    return f"cuda:{device}/s{stream}"


def nccl_stream(group: str, device: int) -> str:
    return f"nccl:{group}/{device}"


@lru_cache(maxsize=4096)
def parse(text: str) -> Actor:
    match = _STREAM.match(text)
    if match:
        return Actor(STREAM, text, int(match.group(1)), int(match.group(2)))
    match = _NCCL.match(text)
    if match:
        return Actor(NCCL, text, int(match.group(2)), group=match.group(1))
    if text.startswith("T"):
        return Actor(HOST, text)
    if text.startswith("cuda:"):  # a device's stream written some other way: its device still counts
        head = text[5:].split("/", 1)[0]
        return Actor(OTHER, text, int(head) if head.isdigit() else None)
    return Actor(OTHER, text)


def device_of(text: str) -> int | None:
    """The device index of a stream actor ("cuda:0/s7" -> 0, "nccl:pg/0" -> 0); None for host threads."""
    return parse(text).device


def is_host(text: str) -> bool:
    return parse(text).is_host
