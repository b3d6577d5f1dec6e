"""Signed documents: written once as text, read back and checked (claim files beside CDI specs)."""

from __future__ import annotations

import json

import pytest

from dra_driver.signed_json import SignedJsonError, checksum, signed_text, verified_body

BODIES = [
    {},
    {"uid": "u-1", "devices": [{"pool": "node-a", "device": "gpu-0"}], "spec": '{"cdiVersion":"0.5.0"}'},
    {"z": 1, "a": [3, 2, 1], "name": "naïve ✓ \u0000 \"quoted\" \\ back"},
]


@pytest.mark.parametrize("body", BODIES)
def test_signed_text_is_the_canonical_signed_document(body: dict[str, object]) -> None:
    text = signed_text(body)
    expected = json.dumps({"body": body, "checksum": checksum(body)}, sort_keys=True, separators=(",", ":"))
    assert text == expected
    assert verified_body(text) == body


@pytest.mark.parametrize("body", BODIES[1:])
def test_any_changed_byte_of_the_body_is_caught(body: dict[str, object]) -> None:
    text = signed_text(body)
    start = text.index('"body":') + len('"body":') + 1
    for at in range(start, text.index(',"checksum"')):
        damaged = text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1 :]
        with pytest.raises(SignedJsonError):
            verified_body(damaged)
