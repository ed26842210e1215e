"""Local stand-ins for real clusters: a KRaft Kafka broker from Maven jars, and a standalone
Spark cluster from the installed pyspark."""
