"""Instrument only a window of training steps: `streamcheck.watch(steps=(100, 110))` or STREAMCHECK_STEPS=100:110.

For always-on use in long jobs: outside the window every hook returns at its first check (the dispatch mode calls
the op, the callbacks return), so a step costs about what the pass-through dispatch mode costs. A step is one
`torch.optim.Optimizer.step()` call anywhere in the process (torch's global step post-hook; DeepSpeed's engine
calls its optimizer's step once per training step); the window covers steps first..last-1, counted from 0 when the
watch starts.

When the window opens, the detector forgets every storage's history (its clocks stay): what it missed while off —
an event recorded, a stream synchronized — could otherwise make an old access look unordered with a new one. Every
edge that can order two accesses inside the window is itself inside it, so nothing is reported that is not a race.

Blind spots (what a window cannot see):
- races between an access before the window and one inside it (the earlier one was forgotten or never seen), and
  races whose later access comes after the window;
- FREE races of blocks allocated before the window opened (their allocation was not seen, so their free is not
  checked);
- ops of threads started, and collectives launched, while outside the window (their work waits order nothing);
- programs that never call an optimizer's step (the window never opens unless it starts at 0); programs with several
  optimizers count each one's step.
"""

from __future__ import annotations

from typing import Any


def parse_window(text: str) -> tuple[int, int]:
    """"100:110" -> (100, 110); a clear ValueError for anything else."""
    first, sep, last = text.partition(":")
    try:
        window = (int(first), int(last)) if sep else None
    except ValueError:
        window = None
    if window is None or window[0] < 0 or window[1] <= window[0]:
        raise ValueError(f"STREAMCHECK_STEPS={text!r}: expected FIRST:LAST with 0 <= FIRST < LAST, e.g. 100:110")
    return window


class StepWindow:
    """Switches a Recorder on for optimizer steps [first, last) and off outside them."""

    def __init__(self, recorder: Any, detector: Any, first: int, last: int) -> None:
        self.recorder = recorder
        self.detector = detector
        self.first = first
        self.last = last
        self.step = 0
        self._handle = None

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._stepped)
        if self.first > 0:
            self.recorder.active = False

    def uninstall(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step += 1
        rec = self.recorder
        if self.step == self.first and rec.error is None:
            with rec.lock:
                self.detector.forget_accesses()
            rec.active = True
        elif self.step == self.last:
            rec.active = False
