"""Defaults of the pipelines' flags that more than the CLI needs (the daemon's config,
the benchmark), in a module light enough for the CLI to import at start."""

# Default cap on records per micro-batch: with it, no backlog can make one batch too big
# for the driver (its bad records travel as positions once a task's budget is spent).
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000
# Default micro-batch interval. An order waits for the next trigger, then for its batch
# (about 0.2 s at moderate rates): at 250 ms the p99 from produce to committed store stays
# under a second at 5,000 orders/s, where 1 s gave 1.3-1.5 s (docs/benchmarks.md, latency).
# Under a backlog batches run back to back whatever the interval.
DEFAULT_TRIGGER_S = 0.25
