import pytest

from service.orders import BadOrder, count_drinks
from tests.corpus import BAD_ORDERS, GOOD_EDGE_ORDERS


@pytest.mark.parametrize(("name", "raw", "reason"), BAD_ORDERS, ids=[b[0] for b in BAD_ORDERS])
def test_bad_orders_are_rejected_with_their_reason(name: str, raw: bytes | None, reason: str) -> None:
    with pytest.raises(BadOrder) as exc:
        count_drinks(raw)
    assert reason in str(exc.value)


def test_corpus_covers_at_least_fifteen_kinds() -> None:
    assert len({reason for _, _, reason in BAD_ORDERS}) >= 15


@pytest.mark.parametrize(("raw", "expected"), GOOD_EDGE_ORDERS)
def test_good_edge_orders(raw: bytes, expected: dict[str, int]) -> None:
    assert count_drinks(raw) == expected


def test_seed_shaped_order() -> None:
    raw = b'{"order_id": "o-1", "shop_id": "shop-07", "items": [{"drink": "latte", "quantity": 2}]}'
    assert count_drinks(raw) == {"latte": 2}
