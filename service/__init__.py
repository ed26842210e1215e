"""The drink-count service: the Spark sink, the RocksDB store and the daemon around them."""
