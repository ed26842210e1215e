"""The shuffle's stages as Spark sinks: the input stage (``input_stage``), which hands each
task its share of every batch through the repartition topic (``restorer.repartition``,
whose rule ``restorer.shuffle`` states)."""
