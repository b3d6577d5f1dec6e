"""GaudiBackend: Intel Gaudi accelerators from the habanalabs sysfs tree (driver gaudi.intel.com)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from dra_driver.backend import sysfs as sysfs_util
from dra_driver.backend.vocabulary import GAUDI_DRIVER
from dra_driver.common.errors import BackendUnavailable, DeviceError
from dra_driver.common.logs import fields
from dra_driver.model.device import Device, Inventory
from dra_driver.backend.interface import (
    AllocatedDevice,
    BackendSettings,
    ClaimRef,
    DeviceSample,
    HealthEvent,
    PreparedClaim,
    PreparedDevice,
    VendorBackend,
)

from dra_driver_gaudi import sysfs
from dra_driver_gaudi.attributes import DeviceFacts, build_device
from dra_driver_gaudi.config import parse_config
from dra_driver_gaudi.discovery import GaudiDevice, discover_devices
from dra_driver_gaudi.edits import claim_edits, device_edits, visibility_edits
from dra_driver_gaudi.health import DEFAULT_INTERVAL_S, HealthState, watch
from dra_driver_gaudi.hlml import Hlml, open_hlml
from dra_driver_gaudi.hlml import HlmlReadings
from dra_driver_gaudi.models import model_for, normalize_device_id

if TYPE_CHECKING:  # a real node never imports the simulation: from_profile loads it
    from dra_driver.simulation import scratch as sim_scratch
    from dra_driver_gaudi.simulated.fake_hlml import FakeHlml
    from dra_driver_gaudi.simulated.fake_sysfs import FakeSysfs

log = logging.getLogger(__name__)
PROFILE_DIR = Path(__file__).parent / "profiles"


class GaudiBackend(VendorBackend):
    vendor: ClassVar[str] = "gaudi"
    driver_name: ClassVar[str] = GAUDI_DRIVER

    def __init__(
        self,
        settings: BackendSettings,
        hlml: Hlml | None = None,
        fake: FakeSysfs | None = None,
        fake_hlml: FakeHlml | None = None,
        workdir: sim_scratch.ScratchDir | None = None,  # simulation only: removed by close
    ) -> None:
        self.settings = settings
        # Simulation handles (None on a real host): tests and the demo inject events through them.
        self.fake = fake
        self.fake_hlml = fake_hlml
        self.health_interval_s = DEFAULT_INTERVAL_S
        self._hlml = hlml
        self._workdir = workdir
        self._health = HealthState()
        self._lock = threading.Lock()
        self._devices: dict[str, GaudiDevice] = {}
        self._warned_unknown: set[str] = set()

    # --- opening -----------------------------------------------------------

    @classmethod
    def from_host(cls, settings: BackendSettings) -> GaudiBackend:
        root = settings.sysfs_root
        if not sysfs.bound_functions(root):
            raise BackendUnavailable(cls.vendor, f"no Gaudi devices bound to the habanalabs driver under {root}")
        devices = discover_devices(root)
        return cls(settings, hlml=open_hlml(device.bdf for device in devices))

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> GaudiBackend:
        from dra_driver.simulation import scratch as sim_scratch
        from dra_driver_gaudi.simulated.fake_hlml import POWER_LIMIT_W, FakeHlml
        from dra_driver_gaudi.simulated.fake_sysfs import build_fake_sysfs

        with ExitStack() as undo:  # an error before the backend exists removes the scratch directory
            workdir = undo.enter_context(sim_scratch.create(cls.vendor))
            fake = build_fake_sysfs(section, workdir.path / "sys")
            serials = {device.bdf: device.serial for device in fake.section.devices if device.serial is not None}
            # Serials come from HLML on real hardware, so a profile with serials gets a simulated HLML.
            models = {device.bdf: model_for(normalize_device_id(device.device_id)) for device in fake.section.devices}
            fake_hlml = (
                FakeHlml(
                    serials,
                    memory={bdf: model.memory_bytes for bdf, model in models.items() if model.memory_bytes},
                    power_limit_w={bdf: POWER_LIMIT_W[model.family] for bdf, model in models.items() if model.family in POWER_LIMIT_W},
                )
                if serials
                else None
            )
            hlml = open_hlml(serials, library=fake_hlml) if fake_hlml else None
            simulated = dataclasses.replace(settings, sysfs_root=fake.root)
            backend = cls(simulated, hlml=hlml, fake=fake, fake_hlml=fake_hlml, workdir=workdir)
            undo.pop_all()  # the backend's close removes it from now on
            return backend

    @classmethod
    def profile_dir(cls) -> Path | None:
        return PROFILE_DIR

    # --- discovery ---------------------------------------------------------

    def _scan(self) -> list[GaudiDevice]:
        devices = discover_devices(self.settings.sysfs_root)
        with self._lock:
            self._devices = {device.name: device for device in devices}
        return devices

    def _facts(self, device: GaudiDevice) -> DeviceFacts:
        hlml = self._hlml
        return DeviceFacts(
            device=device,
            model=model_for(device.device_id),
            serial=hlml.serial(device.bdf) if hlml else "",
            healthy=self._health.verdict(device).healthy,
            memory_bytes=hlml.memory_total(device.bdf) if hlml else None,
            driver_version=sysfs_util.read_text(device.sysfs_dir / "driver_ver"),
        )

    def discover(self) -> Inventory:
        published: list[Device] = []
        for device in self._scan():
            facts = self._facts(device)
            if facts.model.family == "unknown" and device.name not in self._warned_unknown:
                self._warned_unknown.add(device.name)
                log.warning(
                    "unknown Gaudi PCI device id; published with model Unknown and no memory capacity",
                    extra=fields(device=device.name, pci_device_id=device.device_id),
                )
            published.append(build_device(facts, self.settings.node_name))
        return Inventory(driver=self.driver_name, devices=published)

    # --- claims ------------------------------------------------------------

    def validate_config(self, parameters: Mapping[str, Any]) -> BaseModel:
        return parse_config(parameters)

    def _resolve(self, name: str) -> GaudiDevice:
        with self._lock:
            known = self._devices.get(name)
        if known is None:  # not scanned yet, or hot-plugged since the last scan
            known = next((device for device in self._scan() if device.name == name), None)
        if known is None:
            raise DeviceError(name, "no such Gaudi device on this node (not bound to habanalabs, or its sysfs entry is unreadable)")
        return known

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        resolved = [self._resolve(allocated.device) for allocated in devices]
        unique = list({device.name: device for device in resolved}.values())
        by_request: dict[str, list[GaudiDevice]] = {}
        for allocated, device in zip(devices, resolved):
            by_request.setdefault(allocated.request, []).append(device)
        return PreparedClaim(
            devices=[PreparedDevice(device=device.name, edits=device_edits(device, self.settings)) for device in unique],
            claim_edits=claim_edits(self.settings),
            request_edits={request: visibility_edits(members) for request, members in by_request.items()},
        )

    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        """Prepare changed nothing on the node, so there is nothing to undo."""

    # --- device metrics ------------------------------------------------------

    def sample_devices(self) -> list[DeviceSample]:
        """Readings of every scanned device: HLML's (when the library is there) and the driver's reset counters from
        sysfs. Takes no lock prepare needs: the scan's dict is replaced whole, so one reference read is consistent."""
        devices = list(self._devices.values())
        hlml = self._hlml
        samples: list[DeviceSample] = []
        for device in devices:
            found = hlml.readings(device.bdf) if hlml is not None else HlmlReadings()
            errors = dict(found.errors)
            for kind, name in (("hard_reset", "hard_reset_cnt"), ("soft_reset", "soft_reset_cnt")):
                count = sysfs_util.read_int(device.sysfs_dir / name)
                if count is not None:
                    errors[kind] = count
            samples.append(DeviceSample(
                device=device.name, uuid=hlml.serial(device.bdf) if hlml is not None else "", pci_bus_id=device.bdf,
                model=model_for(device.device_id).name, utilization=found.utilization, memory_used_bytes=found.memory_used,
                memory_total_bytes=found.memory_total, power_watts=found.power_watts,
                temperature_celsius=found.temperature_celsius, errors=errors,
            ))  # fmt: skip
        return samples

    def simulate_load(self, busy: Collection[str]) -> None:
        if self.fake_hlml is not None:
            self.fake_hlml.set_busy({device.bdf for device in list(self._devices.values()) if device.name in busy})

    # --- health and lifetime -------------------------------------------------

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        return watch(self._scan, self._health, self._hlml, stop, self.health_interval_s)

    def close(self) -> None:
        if self._hlml is not None:
            self._hlml.close()
            self._hlml = None
        if self._workdir is not None:
            self._workdir.close()
            self._workdir = None
