from __future__ import annotations

import pytest

from dra_driver.model import quantity


@pytest.mark.parametrize(
    "num_bytes, expected",
    [(85520809984, "81559Mi"), (80 << 30, "80Gi"), (1 << 40, "1Ti"), (1000, "1000"), (3072, "3Ki"), (1536, "1536"), (0, "0")],
)
def test_from_bytes_uses_largest_exact_binary_suffix(num_bytes: int, expected: str) -> None:
    assert quantity.from_bytes(num_bytes) == expected
    assert quantity.parse(expected) == num_bytes


def test_is_quantity() -> None:
    assert quantity.is_quantity("40Gi") and quantity.is_quantity("500m") and quantity.is_quantity(7)
    assert not quantity.is_quantity("forty") and not quantity.is_quantity(True) and not quantity.is_quantity(None)


def test_negative_bytes_rejected() -> None:
    with pytest.raises(ValueError):
        quantity.from_bytes(-1)


@pytest.mark.parametrize("text", ["1.5Gi", "500m", "1e3", "81559Mi", "0.1", "12E", "7Ki"])
def test_parser_is_the_kubernetes_clients(text: str) -> None:
    from kubernetes.utils.quantity import parse_quantity as client_parse

    assert quantity.parse(text) == client_parse(text)


def test_quantity_parsing_does_not_load_the_api_client() -> None:
    import subprocess
    import sys

    code = "import sys, dra_driver.model.quantity as q; q.parse('1Gi'); print('kubernetes.client' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
