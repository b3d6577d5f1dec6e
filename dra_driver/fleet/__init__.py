"""`dra-driver fleet`'s library: what a fleet has, what is free, and who holds each device.

    fleet_view(ViewRequest(FleetSource(kubeconfig=...), Filters(...), class_name)) -> FleetView

`cli/fleet.py` only parses arguments and prints (dra_driver.fleet.render).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dra_driver.common import suggest
from dra_driver.allocator import CelMatcher
from dra_driver.common.errors import FieldError
from dra_driver.sources.fleet_source import FleetSource, load_fleet
from dra_driver.ingest.errors import InputError
from dra_driver.sources.classes import SHIPPED, ClassLayer, merge_classes, shipped_class_documents
from dra_driver.fleet.build import Filters, build_view, device_kind
from dra_driver.fleet.model import FleetView
from dra_driver.backend.vocabulary import VENDOR_ALIASES

__all__ = ["Filters", "FleetView", "ViewRequest", "build_view", "device_kind", "fleet_view", "vendor_filter"]


@dataclass(frozen=True)
class ViewRequest:
    source: FleetSource
    filters: Filters = Filters()
    class_name: str | None = None  # show only devices this DeviceClass selects (shipped or from the fleet)


def vendor_filter(names: tuple[str, ...]) -> tuple[str, ...]:
    """Vendor names as people type them (gaudi, NVIDIA) -> dra-driver.io/vendor values; InputError naming the choices."""
    unknown = [n for n in names if n.lower() not in VENDOR_ALIASES]
    if unknown:
        raise InputError([FieldError("--vendor", suggest.unknown("vendor", name, VENDOR_ALIASES)) for name in unknown])
    return tuple(sorted({VENDOR_ALIASES[n.lower()] for n in names}))


def fleet_view(request: ViewRequest) -> FleetView:
    reads_cluster = request.source.cluster() is not None
    source = replace(request.source, with_pods=reads_cluster)
    fleet = load_fleet(source)
    filters, matcher = request.filters, None
    if request.class_name:
        matcher = CelMatcher()
        classes = merge_classes([ClassLayer(SHIPPED, shipped_class_documents()), ClassLayer("fleet", fleet.classes, fleet.class_origins)], matcher)
        if request.class_name not in classes:
            raise InputError(
                [FieldError("CLASS", f"{suggest.unknown('DeviceClass', request.class_name, classes)} (neither shipped nor in the fleet)")]
            )
        filters = replace(filters, device_class=classes[request.class_name])
    return build_view(fleet, filters, matcher, pods_listed=reads_cluster)
