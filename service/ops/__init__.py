"""What operators look at: ``metrics`` (Prometheus), ``status`` (lag, last batch, the
instances, for ``brewstream status`` and health checks), ``http_api`` (one port: metrics,
probes and the routes each pipeline brings), ``queries`` (the pure half of the answers).

Nothing here names a pipeline: each wing brings its own routes (``engine.contract``).
"""
