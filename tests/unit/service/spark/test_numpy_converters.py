"""pyspark's numpy converters, wrapped (``_OnlyOfNumpyValues``): asked only about values of a
type numpy defines, without touching the numpy module (a thread may be half-way through
importing it), and otherwise exactly as pyspark's own."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark.session import _OnlyOfNumpyValues


class Recording:
    def __init__(self) -> None:
        self.asked: list[Any] = []

    def can_convert(self, obj: Any) -> bool:
        self.asked.append(obj)
        return True

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return ("converted", obj)


plain = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary(),
                  st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@given(plain)
def test_a_plain_value_is_never_asked_about(obj: Any) -> None:
    inner = Recording()
    assert _OnlyOfNumpyValues(inner).can_convert(obj) is False
    assert inner.asked == []


@pytest.mark.parametrize("obj", [np.array([1, 2]), np.int64(3), np.float32(1.5), np.bool_(True)])
def test_a_numpy_value_is_asked_about_and_converted_by_pyspark_s_own(obj: Any) -> None:
    inner = Recording()
    wrapped = _OnlyOfNumpyValues(inner)
    assert wrapped.can_convert(obj) is True and inner.asked == [obj]
    assert wrapped.convert(obj, None) == ("converted", obj)


def test_a_half_imported_numpy_is_not_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread importing numpy leaves a module without ``ndarray`` in sys.modules for a
    while; a py4j call meanwhile must not fail on it."""
    monkeypatch.setitem(sys.modules, "numpy", types.ModuleType("numpy"))
    assert _OnlyOfNumpyValues(Recording()).can_convert(12) is False
