"""One daemon process among others: ``health`` (its phase, what the probes answer),
``lease`` (who writes a changelog, announced on Kafka, and the takeover by a standby),
``signals`` (SIGINT/SIGTERM as a stop), ``periodic`` (threads that run every so often).

The lease is advisory; one writer per changelog rests on fencing (invariant 6 in
``restorer``).
"""
