"""Defaults of the pipelines' flags that more than the CLI needs (the daemon's config,
the benchmark), in a module light enough for the CLI to import at start."""

# Default cap on records per micro-batch: with it, no backlog can make one batch too big
# for the driver (its bad records travel as positions once a task's budget is spent).
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000
# Default micro-batch interval: none. A daemon's batch starts as soon as the one before it
# has committed, once BATCH_MIN_RECORDS records wait or BATCH_MAX_DELAY_S has passed since
# the last batch started (Spark's minOffsetsPerTrigger and maxTriggerDelay, set by
# engine.query.start_query). So an order waits only for the batch in flight, not for the
# next interval, while a trickle still makes at most four batches a second, each a Spark
# job and a changelog transaction, as a 250 ms interval did (what each costs:
# docs/performance-notes.md, "Start-up and latency"). Under a backlog batches run back to back
# whatever the interval.
DEFAULT_TRIGGER_S = 0.0
BATCH_MIN_RECORDS = 100
BATCH_MAX_DELAY_S = 0.25
# How often a running daemon asks for its changelog's settings (one describe_configs): a
# changelog switched to deletion (cleanup.policy=delete, a retention) is said within this,
# long before the retention it turned on deletes anything (hours, days).
CHANGELOG_CHECK_S = 30.0
