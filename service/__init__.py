"""The daemon and the command line, on top of the state layer (``restorer``) and Kafka
(``topics``). One folder per concern; imports run downwards only (``make lint`` checks it):

    cli/          the ``brewstream`` command: parse flags, call a module, print
    drills/       recovery and failover drills against an oracle, as user commands
    webboard/     ``brewstream board``: the live board in the browser
    pipelines     the registry: every pipeline by name, the only place that names them
    drink_count/  a wing per pipeline: its topics, data path, store format, HTTP routes
    windows/
    engine/       the daemon around any pipeline: roles, start-up order, the query, the sink's
                  shared half, and the pipeline contract (``engine.contract``)
    dlq/          the dead-letter queue: records for it, and the tools that read and replay it
    ops/          what operators look at: metrics, status, the HTTP API
    spark/        the Spark session, its settings, the class archive, the code shipped to executors
    instance/     one process among others: its phases, its lease, signals, periodic threads
    records/      per-record verdicts that run on Spark's executors (no Kafka client there)
"""
