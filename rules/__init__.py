"""Static analysis: libcst facts per file, a whole-program view, and one rule per module."""
