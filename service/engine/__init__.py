"""The daemon around any pipeline; it names none of them.

``contract`` is what a pipeline brings (its topics, sink, reporter, store check, HTTP
routes) and the flags every pipeline shares; ``runner`` runs one through its roles
(active, standby, fenced) in the one start-up order; ``query`` starts, waits on and
restarts the streaming query; ``start_point`` decides where it starts; ``input_guard``
refuses input lost under the store; ``sink`` is the half of every foreachBatch sink
that keeps the commit order (invariant 1 in ``restorer``). ``defaults`` holds the
defaults more than the CLI needs.
"""
