"""Facts for many files in worker processes that never outlive the scan: one file's outcome, and the pool.

The outcome of a file is {"facts": facts object} or {"failure": {message, line, column}} (a parse failure, a
RecursionError, or a bug in a rule's extraction: never an exception). Workers write their cache entries
themselves, so the parent only unpickles results; CPython's parser warnings about the scanned code are silenced
there. A worker blocks reading its task pipe, whose write end it inherited itself, so a parent that dies (SIGKILL,
an unhandled SIGTERM) never gives it an EOF: each worker asks the kernel for SIGKILL when its parent goes (Linux),
and watches its parent id everywhere.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
from typing import Any

# Worker-process state, set once per process by the pool initializer (or directly for in-process runs).
_worker: dict[str, Any] = {}


def _init_worker(backend: Any, cache: Any) -> None:
    _worker["backend"], _worker["cache"] = backend, cache


def _init_pool_worker(backend: Any, cache: Any, parent: int) -> None:
    """A pool worker: as _init_worker, and it dies with the scan (see the module's docstring for why it must)."""
    _init_worker(backend, cache)
    _die_with_parent(parent)
    gc.freeze()  # what the fork inherited is never collected here (nor its pages copied by the collector)
    gc.disable()  # the facts pass makes no cycles (see paused_collector); the worker ends with the scan


# The facts pass makes millions of small objects (syntax trees, facts) and frees nearly all of them by reference
# counting; with CPython's default thresholds (700, 10, 10) the cyclic collector then takes a third of the
# extraction's time (measured: 6.2 s -> 4.4 s CPU on DeepSpeed 0.19.8) and of unpickling the workers' results.
# Raised thresholds keep a collector for the few cycles (about 20 MB less memory than switching it off).
SCAN_GC_THRESHOLDS = (10_000, 20, 100)


@contextlib.contextmanager
def few_collections():
    """Raise the cyclic collector's thresholds for a scan, and restore them (the scan may run inside a program);
    what paused_collector froze is handed back to the collector at the end (unless the program had frozen
    objects of its own before: those it froze stay frozen, and so do the scan's)."""
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    gc.set_threshold(*SCAN_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not frozen_before:
            gc.unfreeze()


@contextlib.contextmanager
def paused_collector():
    """No cyclic collection while the facts are made, and none of them looked at by a collection afterwards.

    The facts pass frees what it makes by reference counting (a detailed file's visitor and its hazard collector
    hold each other: `_FactsVisitor.release` breaks that), so the collector only ever walks the facts kept so far,
    again and again as they grow (vLLM 0.33.0: about 4 s of a cold scan). Afterwards every object alive is frozen:
    the whole-program phase and the rules allocate plenty, and their collections then skip the facts."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _die_with_parent(parent: int) -> None:
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:  # the kernel signals this process the moment the parent goes; nothing to poll
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it went before the prctl took effect
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a backstop): re-parented means orphaned
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="streamcheck-parent-watch", daemon=True).start()


def _extract_one(job: tuple[str, str, str | None]) -> dict:
    """Facts of one file as an outcome: {"facts": facts object} or {"failure": {message, line, column}}.

    The cache entry (JSON) is written here, in the worker, so the parent only unpickles the result.
    """
    display, text, key = job
    backend = _worker["backend"]  # a driver.RulesBackend
    cache = _worker["cache"]  # a FactsCache or None
    try:
        with warnings.catch_warnings():
            # CPython's parser warns about the scanned code ("invalid escape sequence", "is" with a literal):
            # those are the project's own lint's business, not lines on the scanner's stderr.
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            facts = backend.extract(text, display, backend.options)
    except backend.parse_failure as exc:
        failure = _failure_dict(exc)
        if cache and key:
            cache.put(key, {"failure": failure})
        return {"failure": failure}
    except RecursionError:
        return {"failure": {"message": "nesting too deep for the parser", "line": 1, "column": 1}}
    except Exception as exc:  # a bug in a rule's fact extraction must not stop the scan
        return {"failure": {"message": f"internal error while reading the file: {type(exc).__name__}: {exc}",
                            "line": 1, "column": 1}}
    if cache and key:
        cache.put(key, {"facts": backend.facts_to_dict(facts)})
    return {"facts": facts}


def _failure_dict(exc: BaseException) -> dict:
    message = getattr(exc, "message", None) or (exc.args[0] if exc.args else str(exc))
    line = getattr(exc, "line", None) or (exc.args[1] if len(exc.args) > 1 else 1)
    column = getattr(exc, "column", None) or (exc.args[2] if len(exc.args) > 2 else 1)
    return {"message": f"syntax error: {message}", "line": int(line or 1), "column": int(column or 1)}


# Below this many files a process pool costs more than it saves.
_MIN_FILES_FOR_POOL = 8
# A worker's next batch is about this fraction of the work not yet handed out, per job: big batches first (fewer
# round trips), small ones at the end (no worker left with much to do while the others are done).
_SHARE_PER_JOB = 4
# Batches handed to each worker ahead: one running and one waiting, so a worker never waits for the scan process
# to notice a finished batch (it reads results between files of its own).
_BATCHES_AHEAD = 2


def extract_all(to_extract, backend, cache, jobs, progress):
    """Yield (file, source, outcome) for every file to extract, in parallel when it pays; in parallel, in the order
    the outcomes come back (the caller puts the facts back in file order).

    With N jobs, N - 1 worker processes and this process extract: the facts this process makes are never pickled
    (vLLM 0.33.0's facts are 54 MB: 1.1 s to pickle in the workers, 2.2 s to unpickle here), and the process that
    would only wait for results keeps its core busy instead."""
    if not to_extract:
        return
    jobs = jobs if jobs and jobs > 0 else default_jobs()
    work = [(file.display, source.text, key) for file, source, key in to_extract]
    total = len(work)
    _init_worker(backend, cache)
    if jobs == 1 or total < _MIN_FILES_FOR_POOL:
        for index, (item, job) in enumerate(zip(to_extract, work), 1):
            yield item[0], item[1], _extract_one(job)
            if progress:
                progress(index, total)
        return

    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    prepare = getattr(backend, "prepare_extraction", None)
    if prepare is not None:
        prepare()

    # fork: workers inherit the already-imported rules instead of importing them again.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    workers = min(jobs, total) - 1
    split = WorkSplit([len(job[1]) for job in work], workers + 1)
    done_count = 0
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_pool_worker,
                             initargs=(backend, cache, os.getpid())) as pool:
        pending: dict = {}
        while True:
            for future in [future for future in pending if future.done()]:
                for i, outcome in zip(pending.pop(future), future.result()):
                    done_count += 1
                    yield to_extract[i][0], to_extract[i][1], outcome
                    if progress:
                        progress(done_count, total)
            while len(pending) < _BATCHES_AHEAD * workers and (batch := split.batch()):
                pending[pool.submit(_extract_batch, [work[i] for i in batch])] = batch
            i = split.single()
            if i is not None:
                done_count += 1
                yield to_extract[i][0], to_extract[i][1], _extract_one(work[i])
                if progress:
                    progress(done_count, total)
            elif pending:
                wait(pending, return_when=FIRST_COMPLETED)
            else:
                return


class WorkSplit:
    """Files by size, biggest first: the workers take batches from the front, the scan process single files from
    the back (the smallest), until the two meet. The extraction's time grows with a file's size; a worker's batch
    is a share of what is left (`_SHARE_PER_JOB`), so the last batches are small and nobody waits long at the
    end (DeepSpeed 0.19.8's largest file is 1 % of its source, vLLM 0.33.0's 0.6 %)."""

    def __init__(self, sizes: list[int], jobs: int) -> None:
        self.sizes = sizes
        self.order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
        self.front, self.back = 0, len(sizes)
        self.left = sum(sizes)
        self.share = max(1, jobs * _SHARE_PER_JOB)

    def batch(self) -> list[int]:
        """The next worker batch (indexes of `sizes`); [] when every file is handed out."""
        target = max(1, self.left // self.share)
        found: list[int] = []
        filled = 0
        while self.front < self.back and filled < target:
            i = self.order[self.front]
            found.append(i)
            filled += self.sizes[i]
            self.front += 1
        self.left -= filled
        return found

    def single(self) -> int | None:
        """The smallest file not handed out yet, for the scan process; None when every file is handed out."""
        if self.front >= self.back:
            return None
        self.back -= 1
        i = self.order[self.back]
        self.left -= self.sizes[i]
        return i


def _extract_batch(jobs: list[tuple[str, str, str | None]]) -> list[dict]:
    return [_extract_one(job) for job in jobs]


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
