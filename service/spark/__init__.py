"""Spark, as the daemon runs it: ``session`` (build, warm and stop the session),
``conf`` (brewstream's defaults and the user's settings, in order), ``jvm_archive`` (the
driver's class-data archive, a faster start), ``shipped_code`` (brewstream's own code for
the executors), and the JVM's side in ``jvm/`` and ``conf/``.
"""
