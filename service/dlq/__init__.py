"""The dead-letter queue: ``records`` (bad input as DLQ records, fitted to the topic's
limit, within the batch's transaction), ``read`` (the DLQ back, read_committed), and
``show``, ``export`` and ``replay``, the ``brewstream dlq`` tools (an export's line format
is ``topics.dlq_lines``: ``seed-orders --file`` reads it back).
"""
