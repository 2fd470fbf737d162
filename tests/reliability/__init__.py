"""Reliability and security tests (issue 8): concurrency, faults, fuzzing, soak, load."""
