"""The state layer: the store, its changelog, and the one way between them.

Modules: ``codec`` (the bytes of both), ``store`` (RocksDB and its state dir),
``changelog`` (the transactional writer), ``commit`` (the changelog-then-store step and
its fault points, in ``faults``), ``integrity`` (what the changelog must hold for a
store), ``reader`` (applying a changelog, bounded), ``catchup`` (before every start),
``restore`` (the restore and republish commands), ``tasks`` (the state split by key),
``shuffle`` (a repartition part, and the rule by which a task applies each part once),
``repartition`` (the repartition topic's transaction, reads and purge),
``progress`` (for people).

The invariants, stated here once; every other place refers to them:

1. **Order:** changelog commit → store commit → Spark checkpoint commit, never another.
   ``commit.commit_batch`` is the only writer of both; the sinks return to Spark after it.
2. **Idempotent store:** the store keeps, in the same WriteBatch as the counts, the next
   offset to apply for every input partition; a replayed batch (any batch id, even a
   fresh checkpoint) applies only rows at or above them.
3. **Atomic changelog:** one Kafka transaction per batch carries every changed value, the
   offsets, a commit marker and a shape marker per changelog partition, and the batch's
   output records (DLQ, window results, late events); readers use read_committed, so a
   restored store is always a state some batch committed. Behind a shuffle, the same holds
   task by task: each task's share of a batch is one transaction of its own (with its
   offsets, cursors and markers), since each task applies its input by its own cursors.
4. **Absolute values:** changelog values are absolute, never deltas, so a re-produced
   batch is harmless and compaction keeps the latest.
5. **Progress lives with the state:** without a checkpoint the query starts from the
   store's offsets; without a store, the store is restored from the changelog first.
6. **One writer per changelog:** the transactional.id belongs to the changelog
   (``changelog.transactional_id``), so any two writers fence each other; a fenced one
   never commits its store again. Behind a shuffle, one writer per task as well: each
   task's transactional.id is the task's own (``changelog.task_transactional_id``).
7. **Only committed input counts:** every Kafka read of input, changelog or DLQ uses
   isolation.level=read_committed.
8. **Total per-record code:** whatever bytes a record holds, it is counted or reaches the
   DLQ with a reason (``service.records.badrecords``); one record never stops a batch.

And the changelog must be able to serve the store: its partition count and its keys'
routing (``tasks.Routing``) are the ones the store was built against, and it still holds
what the store has not applied (``integrity``).
"""
