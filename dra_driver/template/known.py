"""The hardware dra-driver knows: every shipped profile simulated on one node, in both partitioning modes.

`template` explains what it wrote against this fleet; a request no node of it can
hold is an error, and `nearest` names the known devices that come closest, with
what each one lacks. Everything here is derived from the profiles' discovered
devices (no tables of models in code), so a new profile extends it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from dra_driver.sources import fleet as fleets
from dra_driver.allocator import build_pools
from dra_driver.allocator.types import PoolDevice
from dra_driver.template.intent import DeviceWant
from dra_driver.common.errors import DraError
from dra_driver.backend.hardware_profiles import available_profiles
from dra_driver.model.memory_hint import near_miss
from dra_driver.model import quantity
from dra_driver.backend.vocabulary import FAMILY, device_vendor

MODES = ("static", "dynamic")
CLI_VENDOR = {"nvidia": "nvidia", "amd": "amd", "intel": "gaudi"}  # dra-driver.io/vendor -> --vendor name


@dataclass(frozen=True)
class KnownKind:
    """One kind of device some shipped profile has: a product, whole or as one partition size."""

    vendor: str  # --vendor name: nvidia | amd | gaudi
    driver: str
    product: str  # productName (NVIDIA, AMD) or model (Gaudi)
    family: str
    partition: str  # MIG profile or AMD partition profile; "" for a whole device
    memory: Decimal | None
    per_node: int  # the most devices of this kind one node offers
    profiles: tuple[str, ...]

    def label(self) -> str:
        size = quantity.from_bytes(int(self.memory)) if self.memory is not None else "memory unknown"
        part = f" {self.partition}" if self.partition else ""
        return f"{self.product}{part} ({self.vendor}, {self.family}, {size}, up to {self.per_node} per node; profile {self.profiles[0]})"


def _node_prefix(profile: str, mode: str) -> str:
    return f"{profile}-{mode}-"


@functools.cache
def known_fleet() -> fleets.Fleet:
    """One node per shipped profile and partitioning mode, named `<profile>-<mode>-0`."""
    fleet = fleets.Fleet()
    for profile in sorted(available_profiles()):
        for mode in MODES:
            try:
                fleet.merge(fleets.simulated(profile, 1, mode, node_prefix=_node_prefix(profile, mode)))
            except DraError:  # a vendor whose backend is not installed: its profiles are not known hardware here
                continue
    return fleet


def profile_of(node: str) -> str:
    for mode in MODES:
        marker = f"-{mode}-"
        if marker in node:
            return node.rsplit(marker, 1)[0]
    return node


def _string(device: PoolDevice, name: str) -> str:
    value = device.attributes.get(name)
    return str(value[1]) if value is not None else ""


def _kind_key(device: PoolDevice) -> tuple[str, str, str, str, str, str]:
    driver = device.id.driver
    product = _string(device, f"{driver}/productName") or _string(device, f"{driver}/model") or driver
    whole = device.attributes.get("dra-driver.io/partition") != ("bool", True)
    partition = "" if whole else _string(device, f"{driver}/profile") or _string(device, f"{driver}/partitionProfile")
    memory = device.capacity.get(f"{driver}/memory") or ""
    vendor = device_vendor(driver, device.attributes)
    return CLI_VENDOR.get(vendor, vendor), driver, product, _string(device, FAMILY), partition, memory


@functools.cache
def known_kinds() -> tuple[KnownKind, ...]:
    per_node: Counter[tuple[str, tuple[str, ...]]] = Counter()
    profiles: dict[tuple[str, ...], set[str]] = {}
    for pool in build_pools(known_fleet().slices):
        for device in pool.devices:
            key = _kind_key(device)
            per_node[(pool.name, key)] += 1
            profiles.setdefault(key, set()).add(profile_of(pool.name))
    most: dict[tuple[str, ...], int] = {}
    for (_node, kind), count in per_node.items():
        most[kind] = max(most.get(kind, 0), count)
    kinds = [
        KnownKind(vendor, driver, product, family, partition, quantity.parse(memory) if memory else None, most[key], tuple(sorted(profiles[key])))
        for key in most
        for vendor, driver, product, family, partition, memory in [key]
    ]
    return tuple(sorted(kinds, key=lambda k: (k.vendor, k.product, k.partition)))


def misses(want: DeviceWant, kind: KnownKind) -> list[str]:
    """What `kind` lacks for `want`, in words; empty when one device of it would do."""
    out: list[str] = []
    if want.vendor != "any" and kind.vendor != want.vendor:
        out.append(f"vendor {kind.vendor}")
    if want.model and want.model.lower() not in kind.product.lower():
        out.append(f"not a {want.model}")
    if want.families and kind.family not in want.families:
        out.append(f"family {kind.family}")
    if want.mig and kind.partition != want.mig:
        out.append(f"MIG profile {kind.partition or 'none (whole GPU)'}")
    elif want.partition and not _same_partition(want.partition, kind.partition):
        out.append(f"partition {kind.partition or 'none (whole GPU)'}")
    elif not (want.mig or want.partition) and kind.partition:
        out.append("a partition, not a whole device")
    if want.memory and (kind.memory is None or kind.memory < quantity.parse(want.memory)):
        hint = near_miss(want.memory, kind.memory) if kind.memory is not None else ""
        out.append(
            f"memory {quantity.from_bytes(int(kind.memory)) if kind.memory is not None else 'unknown'} < {want.memory}"
            + (f" ({hint})" if hint else "")
        )
    if want.count > kind.per_node:
        out.append(f"at most {kind.per_node} on one node, {want.count} wanted")
    return out


def _same_partition(wanted: tuple[str, str | None], published: str) -> bool:
    compute, _, memory = published.partition("_")
    return compute == wanted[0] and wanted[1] in (None, memory)


def nearest(want: DeviceWant, kinds: Sequence[KnownKind], limit: int = 3) -> list[str]:
    """The `limit` known kinds that miss the fewest wishes (then the least memory short), each with what it lacks."""
    wanted = quantity.parse(want.memory) if want.memory else Decimal(0)

    def rank(kind: KnownKind) -> tuple[int, bool, Decimal, str]:
        gap = abs(wanted - kind.memory) if kind.memory is not None else wanted
        # A whole device when one was wanted (or a partition when one was) is nearer than any other miss.
        other_shape = bool(kind.partition) != bool(want.mig or want.partition)
        return len(misses(want, kind)), other_shape, gap, kind.label()

    ranked = sorted(kinds, key=rank)[:limit]
    return [
        f"{kind.label()}: " + ("; ".join(misses(want, kind)) or "one fits, but not with the other wishes together (--same, count)") for kind in ranked
    ]
