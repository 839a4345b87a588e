"""What a run says about its sites, streams and storages: the one naming that the detector, the watch, a replayed or
merged trace and the happens-before graph share (the trace's `site`, `stream_name`, `storage_info` and `alloc`
events). Torch-free.

    sites          site id -> frames [[path, line, function], ...], the blamed frame first
    stream_names   actor ("cuda:0/s7") -> a person's name ("side stream first used at train.py:3 in step")
    storage_infos  storage -> {"name", "shape", "dtype", "ds_id", ...}
    alloc_sites    storage -> the site of its allocation
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from streamcheck.findings import frame_text


class Names:
    def __init__(self, sites: Mapping[int, list] | None = None, stream_names: dict[str, str] | None = None,
                 storage_infos: dict[int, dict] | None = None, alloc_sites: dict[int, int] | None = None) -> None:
        # The given dicts themselves, not copies: the watch hands in the detector's, which fill while the program runs.
        self.sites: Any = sites if sites is not None else {}
        self.stream_names = stream_names if stream_names is not None else {}
        self.storage_infos = storage_infos if storage_infos is not None else {}
        self.alloc_sites = alloc_sites if alloc_sites is not None else {}

    @classmethod
    def of(cls, source: Any) -> "Names":
        """The names held by a Detector or a HappensBefore graph (their `names`), or by anything with `sites`,
        `stream_names` and `storage_infos`."""
        names = getattr(source, "names", source)
        return cls(names.sites, names.stream_names, names.storage_infos, getattr(names, "alloc_sites", None))

    @classmethod
    def from_events(cls, events: Iterable[dict]) -> "Names":
        names = cls()
        for event in events:
            names.add(event)
        return names

    def add(self, event: dict) -> None:
        """Take in one trace event (those that name nothing are ignored); lets a replay collect names on its way."""
        name = event.get("e")
        if name == "stream_name" and "stream" in event:
            self.stream_names[str(event["stream"])] = str(event.get("name", ""))
        elif name == "storage_info" and "storage" in event:
            self.storage_infos[event["storage"]] = {k: v for k, v in event.items() if k not in ("e", "storage")}
        elif name == "alloc" and "storage" in event:
            self.alloc_sites[event["storage"]] = event.get("site", -1)
        elif name == "site" and "id" in event:
            self.sites[event["id"]] = event.get("frames") or []

    def frame(self, site: int) -> tuple[str, int, str] | None:
        """(path, line, function) of the blamed frame of a known site."""
        frames = self.sites.get(site)
        if not frames:
            return None
        path, line, function = (list(frames[0]) + ["", 0, ""])[:3]
        return str(path), int(line or 0), str(function)

    def site_text(self, site: int) -> str:
        """"file.py:12" (the file name only) for a known site, "" otherwise."""
        frame = self.frame(site)
        return f"{frame[0].rsplit('/', 1)[-1]}:{frame[1]}" if frame else ""

    def where(self, site: int) -> str:
        return self.site_text(site) or "an unknown site"

    def stack(self, site: int) -> list[str]:
        """"path:line in function" per frame, the blamed frame first (a finding's earlier_stack / later_stack)."""
        return [frame_text(*frame[:3]) for frame in self.sites.get(site) or () if len(frame) >= 3]

    def actor(self, actor: str) -> str:
        """"cuda:0/s1 (side stream created at coordinator.py:115)" when the run named it."""
        name = self.stream_names.get(actor)
        return f"{actor} ({name})" if name else actor

    def streams_of(self, actors: Iterable[str]) -> dict[str, str]:
        """actor -> name for those of `actors` the run named."""
        return {actor: self.stream_names[actor] for actor in actors if actor and actor in self.stream_names}
