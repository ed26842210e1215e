"""Local stand-ins for real clusters: a KRaft Kafka broker, or a replicated cluster of them
with node and network faults for drills, from Maven jars; and a standalone Spark cluster
from the installed pyspark."""
