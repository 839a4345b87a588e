"""Runtime analysis: vector clocks, shadow state, and the hooks that feed them from a real GPU run."""
