"""Unit tests of the claim checks: Kubernetes name rules, this node's pools, a device twice, bounded errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.node import cdi
from dra_driver.model.resource_v1 import DeviceRequestAllocationResult
from dra_driver.model import names
from dra_driver.node.plugin.claim_checks import (
    MAX_ERROR_BYTES,
    MIN_ERROR_BYTES,
    ClaimError,
    bounded,
    check_ref,
    check_results,
    error_limit,
    our_results,
)
from dra_driver.node.plugin.locks import ClaimFileLocks
from dra_driver.backend.interface import ClaimRef

DRIVER = "gpu.example.com"
UID = "4d1c6e0a-7a0e-4a43-9b0e-3b8c5a1f0c11"
SHARE = "4f1c2d3e-0000-4000-8000-000000000001"

# Values no Kubernetes identifier may take: traversal, separators, NUL, control, non-ASCII, empty, huge.
HOSTILE = [
    "../../etc/passwd",
    "..",
    ".",
    "a/b",
    "a\x00b",
    "a\nb",
    "gpu-0\n",  # `$` in a regex matches before a trailing newline
    "gpu-é",
    "ｇｐｕ",
    "",
    " ",
    "-a",
    "a-",
    "x" * 254,
    "y" * 5_000_000,
]


def _ref(**changed: str) -> ClaimRef:
    values = {"namespace": "default", "name": "train", "uid": UID, **changed}
    return ClaimRef(values["namespace"], values["name"], values["uid"])


def _result(**changed: object) -> DeviceRequestAllocationResult:
    return DeviceRequestAllocationResult.model_validate({"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0", **changed})


def _check(*results: DeviceRequestAllocationResult, pools: tuple[str, ...] = ("node-a",)) -> None:
    check_results("ResourceClaim default/train", our_results(list(results), DRIVER), pools)


# --- the claim reference ------------------------------------------------------


@pytest.mark.parametrize("field", ["namespace", "name", "uid"])
@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: ascii(v[:20]) + f"-{len(v)}")
def test_hostile_reference_field_is_refused_with_a_short_message(field: str, value: str):
    with pytest.raises(ClaimError) as err:
        check_ref(_ref(**{field: value}))
    message = str(err.value)
    assert f"claim {field} " in message
    assert len(message.encode()) < 600  # a 5 MB value is never echoed
    assert "\x00" not in message and "\n" not in message


@pytest.mark.parametrize(
    "ref",
    [
        _ref(),
        _ref(uid="uid-1"),  # not a UUID, but the UUID alphabet
        _ref(name="a" * 253, namespace="n" * 63, uid="u" * 128),
        _ref(name="my.claim-1"),
    ],
)
def test_valid_references_pass(ref: ClaimRef):
    check_ref(ref)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", "Default"),
        ("namespace", "a.b"),
        ("namespace", "n" * 64),
        ("name", "Train"),
        ("name", "a_b"),
        ("uid", "u" * 129),
        ("uid", "a.b"),
        ("uid", "a_b"),
    ],
)
def test_kubernetes_rules_beyond_traversal(field: str, value: str):
    with pytest.raises(ClaimError, match=f"claim {field} "):
        check_ref(_ref(**{field: value}))


def test_every_bad_field_is_named_at_once():
    with pytest.raises(ClaimError) as err:
        check_ref(ClaimRef("../ns", "", "a/b"))
    assert all(f"claim {f} " in str(err.value) for f in ("namespace", "name", "uid"))


# --- allocation results --------------------------------------------------------


@pytest.mark.parametrize("pool", ["node-b", "node-a/extra", "other.example.com"])
def test_result_of_another_nodes_pool_is_refused_naming_field_and_value(pool: str):
    with pytest.raises(ClaimError) as err:
        _check(_result(), _result(pool=pool, device="gpu-1"))
    message = str(err.value)
    assert "status.allocation.devices.results[1].pool" in message and repr(pool) in message
    assert "results[0]" not in message
    assert "node-a" in message  # says which pool this node serves


@pytest.mark.parametrize(
    ("field", "value"),
    # "a/b" is a valid <request>/<subrequest>
    [(f, v) for f in ("pool", "device", "request") for v in HOSTILE if (f, v) != ("request", "a/b")],
    ids=lambda v: ascii(v[:20]) + f"-{len(v)}",
)
def test_hostile_result_field_is_refused(field: str, value: str):
    with pytest.raises(ClaimError) as err:
        _check(_result(**{field: value}))
    message = str(err.value)
    assert f"results[0].{field} " in message
    assert len(message.encode()) < 1500


@pytest.mark.parametrize("share", ["../../x", "", SHARE + "\n", "not-a-uuid", SHARE.upper(), SHARE + "0", SHARE.replace("-", "_"), "\x00" * 36])
def test_malformed_share_id_is_refused(share: str):
    with pytest.raises(ClaimError, match=r"results\[0\]\.shareID"):
        _check(_result(shareID=share))


@pytest.mark.parametrize("request_name", ["gpu", "gpu/large", "a" * 63 + "/" + "b" * 63])
def test_valid_request_names(request_name: str):
    _check(_result(request=request_name))


@pytest.mark.parametrize("request_name", ["gpu/a/b", "gpu/", "/gpu", "Gpu", "gpu_1"])
def test_invalid_request_names(request_name: str):
    with pytest.raises(ClaimError, match=r"results\[0\]\.request"):
        _check(_result(request=request_name))


def test_pool_with_slashes_is_fine_when_it_is_ours():
    _check(_result(pool="zone-a/node-a"), pools=("zone-a/node-a",))


def test_other_drivers_results_are_not_ours_to_check():
    foreign = DeviceRequestAllocationResult.model_validate({"request": "nic", "driver": "nic.other.com", "pool": "../x", "device": "ETH0"})
    _check(_result(), foreign)


@pytest.mark.parametrize(
    "second",
    [
        {"request": "other"},  # exclusive twice
        {"request": "other", "shareID": SHARE},  # a share beside an exclusive use
    ],
)
def test_same_device_twice_is_refused(second: dict[str, object]):
    with pytest.raises(ClaimError) as err:
        _check(_result(), _result(**second))
    assert "more than once" in str(err.value) and "results[0]" in str(err.value) and "results[1]" in str(err.value)


def test_same_share_twice_is_refused():
    with pytest.raises(ClaimError, match="more than once"):
        _check(_result(shareID=SHARE), _result(request="b", shareID=SHARE))


@pytest.mark.parametrize(
    "pair",
    [
        ({"adminAccess": True}, {"request": "b", "adminAccess": True}),
        ({}, {"request": "b", "adminAccess": True}),  # an admin request beside an exclusive one
        ({"shareID": SHARE}, {"request": "b", "shareID": "4f1c2d3e-0000-4000-8000-000000000002"}),
        ({}, {"request": "b", "device": "gpu-1"}),
        ({}, {"request": "b", "pool": "node-b"}),  # same device name, another pool (also ours)
    ],
)
def test_allowed_repeats(pair: tuple[dict[str, object], dict[str, object]]):
    _check(_result(**pair[0]), _result(**pair[1]), pools=("node-a", "node-b"))


# --- bounded errors -------------------------------------------------------------


def test_bounded_keeps_short_text():
    assert bounded("short") == "short"


def test_bounded_cuts_huge_text_with_marker():
    text = bounded("x" * 5_000_000)
    assert len(text.encode()) <= MAX_ERROR_BYTES
    assert text.startswith("xxx") and "truncated, 5000000 bytes in all" in text


def test_bounded_never_splits_a_character():
    text = bounded("é" * 2000, 101)
    assert len(text.encode()) <= 101
    text.encode("utf-8")  # valid UTF-8: a protobuf string field would reject anything else


def test_error_limit_shrinks_with_many_failing_claims():
    assert error_limit(1) == MAX_ERROR_BYTES
    assert error_limit(2048) == 512
    assert error_limit(10**6) == MIN_ERROR_BYTES


# --- names never become paths unchecked -------------------------------------------


@pytest.mark.parametrize("uid", ["../../victim", "a/b", "a\x00b", "", "é"])
def test_spec_path_refuses_a_uid_that_is_not_one(tmp_path: Path, uid: str):
    with pytest.raises(ValueError, match="no CDI spec path"):
        cdi.spec_path(tmp_path, DRIVER, uid)


@pytest.mark.parametrize("uid", ["../../victim", "a/b", "..", "x" * 5000])
def test_lock_file_of_an_odd_uid_stays_in_its_directory(tmp_path: Path, uid: str):
    locks = ClaimFileLocks(tmp_path / "claims")
    path = Path(locks.path(uid))
    assert path.parent == tmp_path / "claims" and path.name.startswith("sha256-")
    with locks.hold(uid):
        assert path.exists()


def test_file_stem_keeps_valid_uids():
    assert names.file_stem(UID) == UID
    assert names.file_stem("a/b") != names.file_stem("a_b")


@pytest.mark.parametrize("uid", ["a b", "..", "x" * 200, "é", ""])
def test_spec_file_with_an_odd_uid_is_not_ours(tmp_path: Path, uid: str):
    assert cdi.claim_uid_of(tmp_path / f"k8s.{DRIVER}-device_{uid}.json", DRIVER) is None


def test_spec_file_with_a_valid_uid_is_ours(tmp_path: Path):
    assert cdi.claim_uid_of(Path(cdi.spec_path(tmp_path, DRIVER, UID)), DRIVER) == UID


# --- property: no value that passes the rules can steer a path or a CDI name ----------------------

_CDI_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]$")
# Text biased towards the characters that matter: separators, dots, NUL, case, digits, non-ASCII.
_TEXT = st.text(alphabet=st.sampled_from(list("ab09-./_:\x00 Aé\n")) | st.characters(), max_size=80)
_SETTINGS = settings(max_examples=300, derandomize=True, database=None, deadline=None)


@_SETTINGS
@given(uid=_TEXT)
def test_an_accepted_uid_never_leaves_its_directory(uid: str):
    base = Path("/cdi")
    if names.uid_problem(uid) is not None:
        with pytest.raises(ValueError):
            cdi.spec_path(base, DRIVER, uid)
        return
    assert Path(cdi.spec_path(base, DRIVER, uid)).parent == base
    assert Path(ClaimFileLocks(base).path(uid)).parent == base
    assert _CDI_NAME.match(cdi.request_device_name(uid, "gpu"))


@_SETTINGS
@given(pool=_TEXT, device=_TEXT, request=_TEXT, share=st.none() | _TEXT | st.uuids().map(str))
def test_accepted_results_make_valid_cdi_names(pool: str, device: str, request: str, share: str | None):
    result = _result(pool=pool, device=device, request=request, shareID=share)
    try:
        _check(result, pools=(pool,))
    except ClaimError:
        return
    name = cdi.cdi_device_name(UID, pool, device, share)
    assert _CDI_NAME.match(name) and "/" not in name
    assert _CDI_NAME.match(cdi.request_device_name(UID, request.split("/")[0]))
