"""Verdicts on single records, run inside Spark's executors: ``badrecords`` (what a bad
record carries to the driver, within a budget), ``json_reasons`` (why a JSON value is
not what was expected, in words), ``limits`` (the bound on names, and names shown safely).

Invariant 8 in ``restorer`` lives here: whatever bytes a record holds, it is counted or
gets a reason. Nothing here imports a Kafka client or the store (``make lint``).
"""
