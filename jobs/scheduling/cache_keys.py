"""Cache keys the scheduling cycle writes and the pages, the API and ``/metrics`` read.

They live apart from ``jobs.scheduling.cycle`` so readers need not import the scheduler (and the
scheduler, which sends held jobs to approval, need not be imported back by what approvals read).
"""

EXPLAIN_KEY = "explain:{}"  # one waiting job's explanation, by job id
QUEUE_KEY = "explain:queue"  # the waiting jobs in the last cycle's order
LAST_CYCLE_KEY = "scheduler:last_cycle"  # when and how the last cycle ran (the portal's /metrics)
STARTS_KEY = "starts:queue"  # estimated starts of the waiting jobs (jobs.scheduling.start_estimates), packed
