"""Everything that talks to a cluster: the backends (pure, `backends/`), inventory sync, dispatch (the
outbox to the backends), job logs and dev-port access, node cordon/drain and map, GPU metrics."""
