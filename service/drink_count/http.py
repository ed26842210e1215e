"""drink-count's HTTP paths: ``/api/counts`` and ``/api/top?n=10`` (answers are pure).

Each answer is built from one snapshot of the store and names the batch it reflects
(``service.ops.queries.batch_fields``)."""

from __future__ import annotations

from collections.abc import Mapping

from restorer.store import Store
from restorer.tasks import split_by_task, tasks_json
from service.drink_count.counts import DrinkCounts, drink_counts, task_counts
from service.drink_count.topn import merged_top, top_n
from service.ops.queries import Answer, Route, batch_fields, top_param


def counts_answer(store: DrinkCounts) -> dict[str, object]:
    """``/api/counts``: what ``brewstream counts --json`` prints, with the batch; each task
    labelled with how far its changelog partition has come (and, by the API, its owner)."""
    return {**batch_fields(store.state), "processed_orders": store.processed_orders,
            "bad_orders": store.bad_orders, "counts": dict(sorted(store.counts.items())),
            "tasks": tasks_json(split_by_task(store.state))}


def top_answer(store: DrinkCounts, n: int) -> dict[str, object]:
    """``/api/top``: the board's ranking (ties by drink name), with the batch, merged from
    each task's own top ``n`` (as instances holding a share of the tasks would give them),
    each task labelled like ``/api/counts``'."""
    tasks = split_by_task(store.state)
    # A store not yet built against its changelog has no tasks: its counts are ranked whole.
    ranked = (merged_top((top_n(task_counts(task), n) for task in tasks.values()), n) if tasks
              else top_n(store.counts, n))
    return {**batch_fields(store.state), "processed_orders": store.processed_orders,
            "top": [{"rank": r.rank, "drink": r.drink, "count": r.count} for r in ranked],
            "tasks": tasks_json(tasks)}


def routes() -> dict[str, Route]:
    def counts(_params: Mapping[str, str]) -> Answer:
        return lambda store: counts_answer(_read(store))

    def top(params: Mapping[str, str]) -> Answer:
        n = top_param(params)
        return lambda store: top_answer(_read(store), n)

    return {"/api/counts": Route((), counts), "/api/top": Route(("n",), top)}


def _read(store: Store) -> DrinkCounts:
    return drink_counts(store.read_all())
