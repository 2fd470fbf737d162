"""The policy advisor (issue 25): search policy settings over replays of the trace (pure core)."""
