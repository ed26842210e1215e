"""Unit tests of the benchmark's pure parts. They live here, not under ``tests/``: the
import contracts keep ``tests`` and ``bench`` apart (pyproject's importlinter layers), so
``pytest bench/tests`` runs them (``make test`` collects ``tests/`` only)."""
