"""A claim's constraint that names an attribute no device of the fleet publishes: one note with a did-you-mean.

The allocator reports such a constraint once per device ("device does not have this attribute"); the
name itself is the mistake, so explain says so once, with the fleet's own attribute names that come
close, and for matchAttribute the attributes that group devices (docs/attributes.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.allocator import ClaimSpec
from dra_driver.allocator.types import Pool
from dra_driver.backend.vocabulary import INTERCONNECT_DOMAIN, PCIE_ROOT
from dra_driver.common import suggest

# What each grouping attribute means, for a matchAttribute on a name the fleet lacks.
GROUPINGS = {INTERCONNECT_DOMAIN: "one NVLink/XGMI/Gaudi scale-up domain", PCIE_ROOT: "one PCIe root complex"}


def constraint_hints(claims: Sequence[ClaimSpec], pools: Sequence[Pool]) -> list[str]:
    published = {name for pool in pools for device in pool.devices for name in device.attributes}
    notes: list[str] = []
    for claim in claims:
        for index, constraint in enumerate(claim.constraints):
            attribute = constraint.match_attribute or constraint.distinct_attribute or ""
            if not attribute or attribute in published or not published:
                continue
            kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
            hint = suggest.did_you_mean(attribute, sorted(published))
            groups = [f"{name} ({meaning})" for name, meaning in GROUPINGS.items() if name in published]
            if constraint.match_attribute and groups and not any(name in hint for name in GROUPINGS):
                hint += ("; " if hint else "") + "devices are kept together by " + " or ".join(groups)
            notes.append(f"claim {claim.label} constraints[{index}].{kind}: no device of this fleet has {attribute}" + (f"; {hint}" if hint else ""))
    return notes
