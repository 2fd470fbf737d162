"""Trace replay on a virtual clock through the production engine (DESIGN §9)."""
