"""Signed documents: written once as text, read back and checked (claim files beside CDI specs)."""

from __future__ import annotations

import json

import pytest

from dra_driver.common.signed_json import SignedJsonError, checksum, signed_text, verified_body

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


@pytest.mark.parametrize("body", BODIES)
def test_a_document_as_written_is_checked_on_its_bytes_and_any_other_layout_the_canonical_way(
    body: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up verifies thousands of claim records: re-encoding each body canonically was most of the cost."""
    from dra_driver.common import signed_json

    encoded: list[object] = []
    real = signed_json.canonical
    monkeypatch.setattr(signed_json, "canonical", lambda value: (encoded.append(value), real(value))[1])
    text = signed_text(body)
    encoded.clear()
    assert verified_body(text) == body and verified_body(text.encode()) == body
    assert encoded == []
    spaced = json.dumps({"body": body, "checksum": checksum(body)}, indent=1)  # signed the same, laid out otherwise
    encoded.clear()
    assert verified_body(spaced) == body and len(encoded) == 1
    wrong = text[: -len('0"}')] + ('1"}' if text[-3] == "0" else '0"}')  # the checksum's last digit changed
    with pytest.raises(SignedJsonError, match="checksum mismatch"):
        verified_body(wrong)
