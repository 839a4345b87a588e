"""Where a watch's races become findings: dedupe with counts, the JSONL file, the echo, fail-fast.

- Findings are deduplicated by (race kind, earlier site, later site) — for a RAW race the write site and the read
  site — with a count; sites are blamed on the first frame outside torch and streamcheck.
- The file: `<out_dir>/streamcheck-rank{R}.jsonl`, a header line, then one Finding.to_dict() line per new finding,
  flushed at once so a killed job keeps what it found; `close()` appends a final line for every finding seen more
  than once, with its count (readers keep the last line of each fingerprint). Internal errors get an "error" line.
- A race is echoed once to stderr; with `fail_fast` the first one raises RaceError into the program.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from streamcheck.constants import FINDINGS_FORMAT, FINDINGS_VERSION
from streamcheck.findings import Finding

from .detector import Race
from .races import Names, race_finding
from .recorder import RaceError

MAX_KEPT_RACES = 10000  # the detector keeps every race; a long run must not grow without bound


def findings_path(out_dir: str | os.PathLike, rank: int) -> Path:
    return Path(out_dir) / f"streamcheck-rank{rank}.jsonl"


class FindingSink:
    """One process's findings; `on_race` is the detector's callback. See the module docstring."""

    def __init__(self, out_dir: Path, rank: int, world_size: int, *, echo: bool = True, fail_fast: bool = False,
                 append: bool = False) -> None:
        self.out_dir = out_dir
        self.rank = rank
        self.world_size = world_size
        self.echo = echo
        self.fail_fast = fail_fast
        self.append = append
        self.findings: dict[tuple, Finding] = {}
        self.counts: dict[tuple, int] = {}
        self.path: Path | None = None
        self.lock = threading.Lock()
        self._file = None
        # set by bind(): what a finding is named from
        self.detector: Any = None
        self.names: Names | None = None
        self.trace: Any = None  # a TraceWriter that also keeps the storage infos, or None
        self._storage_namer = None  # instrument/storage_names.StorageNamer, made at the first report
        self._site_keys: dict[tuple, tuple] = {}

    def bind(self, detector: Any, names: Names, trace: Any = None) -> None:
        self.detector, self.names, self.trace = detector, names, trace

    # ---- races ---------------------------------------------------------------------------------------------------
    def _site_key(self, site: int, op: str) -> tuple:
        # a site's frames never change once captured: resolved (a line-table scan) once per site, not per race
        key = self._site_keys.get((site, op))
        if key is None:
            frame = self.names.frame(site)
            key = self._site_keys[(site, op)] = (frame[0], frame[1]) if frame else ("<unknown>", op)
        return key

    def on_race(self, race: Race) -> None:
        key = (race.kind, self._site_key(race.earlier.site, race.earlier.op),
               self._site_key(race.later.site, race.later.op))
        races = self.detector.races
        if len(races) > MAX_KEPT_RACES:
            del races[: len(races) - MAX_KEPT_RACES // 10]
        with self.lock:
            if key in self.counts:
                self.counts[key] += 1
                return
            finding = self._finding(race)
            self.findings[key] = finding
            self.counts[key] = 1
            self._write_line(finding.to_dict())
        if self.echo:
            print(f"streamcheck: rank {self.rank}: {finding.rule} {finding.message}", file=sys.stderr, flush=True)
        if self.fail_fast:
            raise RaceError(finding.message)

    def _finding(self, race: Race) -> Finding:
        return race_finding(race, self.names, rank=self.rank, pid=os.getpid(), world_size=self.world_size,
                            tensor=self._storage_info(race))

    def _storage_info(self, race: Race) -> dict:
        """What the report says about the raced storage: name, shape, dtype, ds_id, allocation site.

        Looked up once per storage when it is first reported (instrument/storage_names.py walks the live modules),
        and kept in the Detector's (and the trace's) storage infos like any `storage_info` event."""
        detector = self.detector
        info = detector.storage_infos.get(race.storage)
        if info is None:
            info = {}
            try:
                if self._storage_namer is None:
                    from .storage_names import StorageNamer

                    self._storage_namer = StorageNamer()
                info = self._storage_namer.describe(race.storage, race.start, race.end) or {}
            except Exception:  # noqa: BLE001 - naming is a courtesy; the finding stands without it
                info = {}
            allocation = detector.allocations.get(race.storage)
            frame = self.names.frame(allocation.site) if allocation is not None else None
            if frame:
                info["alloc_site"] = f"{frame[0].rsplit('/', 1)[-1]}:{frame[1]}"
            detector.storage_infos[race.storage] = info  # inside the detector's call: no second sink call
            if info and self.trace is not None:
                self.trace.storage_info(race.storage, **info)
        return dict(info)

    def results_for(self, key: tuple) -> Finding:
        return dataclasses.replace(self.findings[key], count=self.counts[key])

    def results(self) -> list[Finding]:
        return [self.results_for(key) for key in self.findings]

    def error(self, exc: BaseException) -> None:
        with self.lock:
            self._write_line({"e": "error", "rank": self.rank, "error": repr(exc)})

    # ---- the file ------------------------------------------------------------------------------------------------
    def open(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = findings_path(self.out_dir, self.rank)
        self._file = open(path, "a" if self.append else "w", encoding="utf-8")
        self._write_line({"e": "header", "format": FINDINGS_FORMAT, "version": FINDINGS_VERSION, "rank": self.rank,
                          "world_size": self.world_size, "pid": os.getpid(), "argv": list(sys.argv),
                          "started": time.time(), "cuda": _cuda_available()})
        self.path = path

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                for key in self.findings:
                    if self.counts[key] > 1:
                        self._write_line(self.results_for(key).to_dict())
                self._file.close()
                self._file = None

    def _write_line(self, record: dict) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()


def _cuda_available() -> bool | None:
    """For the header: `streamcheck run` says so when a rank had no CUDA (then no stream ran, nothing can race)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - the header must not fail the run
        return None
