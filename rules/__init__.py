"""Static analysis: facts per file (one `ast` pass), a whole-program view, and one rule per module."""
