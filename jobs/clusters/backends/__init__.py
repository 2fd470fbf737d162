"""Cluster backends (pure: no Django): the `Backend` protocol and the Slurm, Kubernetes, Volcano and
simulator implementations. `registry.backend_for` picks one from a cluster's kind and config."""
