"""The pure scheduling engine (DESIGN §4–§6): ordering, placement, preemption, backfill, forecast and
the autoscaler's rule. No Django: fed frozen snapshots and `now` (`jobs.scheduling` feeds it from the
database). Public entry points: `scheduler.schedule` / `scheduler.Engine`, `placement`, `forecast`."""
