"""The shuffle's stages as Spark sinks: the input stage (``input_stage``), which hands each
task its share of every batch through the repartition topic (``restorer.repartition``),
and the task stage (``task_stage``), which applies each part once by the rule
``restorer.shuffle`` states."""
