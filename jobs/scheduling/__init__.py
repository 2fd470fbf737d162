"""The engine run against the database: the scheduling cycle (`cycle.schedule_once`), the snapshot it
reads, the warm engine between cycles, explanations, start estimates and the autoscaler's tick."""
