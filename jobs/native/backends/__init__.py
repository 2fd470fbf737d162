"""Pure parsers and renderers of native workloads (sacct, pods, sacctmgr, Kueue/YuniKorn queues)."""
