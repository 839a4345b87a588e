"""Helpers of the engine (a docstring that says "stream" and "synchronize": no code of this file names either)."""

# all_reduce, wait_event and non_blocking are only mentioned here


def halved(t):
    reduced = t * 0.5  # `reduced` is no `reduce`
    return reduced


def describe(t):
    return "non_blocking copy of " + repr(t.shape) + ' on the "side" stream'
