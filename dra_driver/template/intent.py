"""What a person asks `dra-driver template` for, parsed from flags and checked before anything is built.

Flags are untrusted: every value that ends up inside a CEL string literal is
checked against a narrow pattern first, and every problem is a FieldError
naming the flag and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from dra_driver.common import suggest
from dra_driver.common.errors import FieldError
from dra_driver.model import quantity
from dra_driver.model.names import MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN
from dra_driver.model.resource_v1 import MAX_SUBREQUESTS
from dra_driver.model.validation import is_dns_label, is_dns_subdomain

VENDORS = ("nvidia", "amd", "gaudi", "any")
GROUPINGS = {"interconnect": "one NVLink clique / XGMI hive / Gaudi box", "pcie-root": "one PCIe root complex", "numa": "one NUMA node"}
INTERVALS = ("Default", "Short", "Medium", "Long")
MAX_COUNT = 1024  # far beyond any node; a typo guard, the API has no limit of its own
MAX_FALLBACKS = MAX_SUBREQUESTS - 1  # firstAvailable holds the first choice and the fallbacks

_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.+/()-]{0,63}\Z")
_FAMILY = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}\Z")
_MIG = re.compile(r"^[0-9]{1,2}g\.[0-9]{1,4}gb(\+[a-z0-9]{1,8})?\Z")
_PARTITION = re.compile(r"^(spx|dpx|qpx|cpx)(?:[-_/]?(nps1|nps2|nps4))?\Z")
_SHORT = re.compile(r"^([0-9]+)x(.+)\Z")
WANT_KEYS = ("count", "vendor", "model", "family", "memory", "mig", "partition")


@dataclass(frozen=True)
class DeviceWant:
    """One choice of devices: the request itself, or one fallback of firstAvailable."""

    count: int = 1
    vendor: str = "any"  # nvidia | amd | gaudi | any
    model: str | None = None  # a substring of the product name (NVIDIA, AMD) or model (Gaudi)
    families: tuple[str, ...] = ()  # dra-driver.io/family values
    memory: str | None = None  # minimum device memory, a quantity
    mig: str | None = None  # NVIDIA MIG profile, 1g.10gb
    partition: tuple[str, str | None] | None = None  # AMD (compute, memory) partition mode, ("cpx", "nps4")

    def describe(self) -> str:
        parts = [f"{self.count} x"]
        parts += [self.vendor] if self.vendor != "any" else []
        parts += [self.model] if self.model else []
        parts += ["/".join(self.families)] if self.families else []
        parts += [f"MIG {self.mig}"] if self.mig else []
        parts += [f"partition {'_'.join(p for p in self.partition if p)}"] if self.partition else []
        parts += [f">= {self.memory}"] if self.memory else []
        return " ".join(parts)


@dataclass(frozen=True)
class Sharing:
    strategy: Literal["TimeSlicing", "MPS"]
    interval: str | None = None  # TimeSlicing
    threads: int | None = None  # MPS defaultActiveThreadPercentage
    pinned_memory: str | None = None  # MPS defaultPinnedDeviceMemoryLimit


@dataclass(frozen=True)
class Intent:
    name: str
    namespace: str | None
    request: str
    wants: tuple[DeviceWant, ...]  # first choice, then fallbacks in order
    same: str | None = None  # a GROUPINGS key
    sharing: Sharing | None = None
    admin_access: bool = False
    as_claim: bool = False  # ResourceClaim instead of ResourceClaimTemplate
    command: str = ""  # the command line, written as the first comment
    share_memory: str | None = None  # consumable capacity: this much of one GPU's memory (capacity.requests.memory)


@dataclass
class Problems:
    errors: list[FieldError] = field(default_factory=list)

    def add(self, where: str, message: str) -> None:
        self.errors.append(FieldError(where, message))


def _count(value: str, where: str, problems: Problems) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_COUNT:
        problems.add(where, f"count {value!r} must be a whole number from 1 to {MAX_COUNT}")
        return 1
    return int(value)


def _memory(value: str, where: str, problems: Problems) -> str | None:
    if not quantity.is_quantity(value) or quantity.parse(value) <= 0:
        problems.add(where, f"memory {value!r} is not a positive quantity; write it like 40Gi or 80G")
        return None
    return value


def _partition(value: str, where: str, problems: Problems) -> tuple[str, str | None] | None:
    match = _PARTITION.match(value.lower())
    if not match:
        problems.add(where, f"AMD partition {value!r} is not a mode; write cpx, dpx, qpx or with a memory mode: cpx_nps4")
        return None
    if match.group(1) == "spx":
        problems.add(where, "spx is the whole GPU, not a partition; leave out the partition")
        return None
    return match.group(1), match.group(2)


def parse_want(values: dict[str, str], where: str, problems: Problems) -> DeviceWant:
    """A DeviceWant from flag values by WANT_KEYS name (absent keys keep their defaults)."""
    want = DeviceWant()
    if "count" in values:
        want = replace(want, count=_count(values["count"], f"{where} count", problems))
    vendor = values.get("vendor", "any").lower()
    vendor = "gaudi" if vendor == "intel" else vendor  # the vendor attribute says intel; people say gaudi
    if vendor not in VENDORS:
        problems.add(f"{where} vendor", suggest.unknown("vendor", vendor, VENDORS))
    else:
        want = replace(want, vendor=vendor)
    if "model" in values:
        if not _MODEL.match(values["model"]):
            problems.add(
                f"{where} model", f"model {values['model']!r} may hold only letters, digits, spaces and ._+/()- (at most 64), such as H100 or MI300X"
            )
        else:
            want = replace(want, model=values["model"])
    if "family" in values:
        families = tuple(sorted({f.strip().lower().replace(" ", "-") for f in values["family"].split("/") if f.strip()}))
        bad = [f for f in families if not _FAMILY.match(f)]
        if bad or not families:
            problems.add(
                f"{where} family",
                f"family {values['family']!r} must be names like blackwell, hopper, ada-lovelace, cdna3, gaudi3 (several: blackwell/hopper)",
            )
        else:
            want = replace(want, families=families)
    if "memory" in values:
        want = replace(want, memory=_memory(values["memory"], f"{where} memory", problems))
    if "mig" in values:
        if not _MIG.match(values["mig"]):
            problems.add(f"{where} mig", f"MIG profile {values['mig']!r} is not a profile name such as 1g.10gb or 3g.40gb")
        else:
            want = replace(want, mig=values["mig"])
    if "partition" in values:
        want = replace(want, partition=_partition(values["partition"], f"{where} partition", problems))
    if want.mig and want.partition:
        problems.add(where, "a MIG profile (NVIDIA) and an AMD partition cannot be asked for by the same choice; use a fallback for the other")
    return want


def parse_fallback(spec: str, index: int, problems: Problems) -> DeviceWant:
    """`4xA100`, `4`, `A100`, or `count=4,model=A100,memory=80Gi` (keys: WANT_KEYS), mixed freely: `4xA100,memory=80Gi`."""
    where = f"--fallback #{index + 1}"
    values: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if sep:
            key = key.strip().lower()
            if key not in WANT_KEYS:
                problems.add(where, f"unknown key {key!r} in {spec!r}; use {', '.join(WANT_KEYS)}")
            else:
                values[key] = value.strip()
            continue
        short = _SHORT.match(part)
        if short:
            values["count"], values["model"] = short.group(1), short.group(2).strip()
        elif part.isdigit():
            values["count"] = part
        else:
            values["model"] = part
    if not values:
        problems.add(where, "is empty; write it like 4xA100 or count=4,model=A100")
    return parse_want(values, where, problems)


def parse_share_memory(value: str, problems: Problems) -> str | None:
    """`--share-memory 20Gi`: a quantity of at least 1Gi (the smallest share a shareable GPU gives)."""
    if not quantity.is_quantity(value) or quantity.parse(value) < 1 << 30:
        problems.add("--share-memory", f"{value!r} is not a quantity of at least 1Gi; write it like 20Gi")
        return None
    return value


def parse_sharing(spec: str, problems: Problems) -> Sharing | None:
    """`time-slicing[:INTERVAL]` or `mps[:threads=N][,pinned-memory=Q]` (upstream NVIDIA GpuConfig sharing)."""
    strategy, _, options = spec.partition(":")
    strategy = strategy.strip().lower()
    if strategy in ("time-slicing", "timeslicing"):
        if not options:
            return Sharing("TimeSlicing")
        interval = next((i for i in INTERVALS if i.lower() == options.strip().lower()), None)
        if interval is None:
            problems.add("--sharing", f"time-slicing interval {options!r} is not one of {', '.join(INTERVALS)}")
        return Sharing("TimeSlicing", interval=interval)
    if strategy != "mps":
        problems.add("--sharing", f"unknown strategy {strategy!r}; use time-slicing[:Short|Medium|Long] or mps[:threads=50,pinned-memory=10Gi]")
        return None
    threads: int | None = None
    pinned: str | None = None
    for part in (p.strip() for p in options.split(",") if p.strip()):
        key, _, value = part.partition("=")
        if key == "threads" and value.isdigit() and 0 <= int(value) <= 100:
            threads = int(value)
        elif key == "pinned-memory" and quantity.is_quantity(value) and quantity.parse(value) >= 1 << 20:
            pinned = value
        else:
            problems.add(
                "--sharing", f"MPS option {part!r}: use threads=<0..100> (active thread percentage) or pinned-memory=<quantity of at least 1Mi>"
            )
    return Sharing("MPS", threads=threads, pinned_memory=pinned)


def check_names(intent: Intent, problems: Problems) -> None:
    """The object, namespace and request names the API server would accept."""
    if not is_dns_subdomain(intent.name):
        problems.add("--name", f"{intent.name!r} is not a valid object name (lower-case letters, digits, '-' and '.', at most {MAX_DNS_SUBDOMAIN})")
    label = f"a DNS label: lower-case letters, digits and '-', at most {MAX_DNS_LABEL}"
    if intent.namespace is not None and not is_dns_label(intent.namespace):
        problems.add("--namespace", f"{intent.namespace!r} is not a valid namespace ({label})")
    if not is_dns_label(intent.request):
        problems.add("--request", f"{intent.request!r} is not a valid request name ({label})")
    if len(intent.wants) > MAX_FALLBACKS + 1:
        problems.add("--fallback", f"{len(intent.wants) - 1} fallbacks; firstAvailable takes at most {MAX_FALLBACKS} besides the first choice")
    if intent.same is not None and intent.same not in GROUPINGS:
        problems.add("--same", f"{intent.same!r} is not one of {', '.join(GROUPINGS)}")
