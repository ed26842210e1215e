"""The benchmark harness behind ``make bench``: brewstream against a plain consumer and
Quix Streams on one sandbox broker, one data set and one machine. See BENCHMARKS.md."""
