"""The import paths outside code relies on keep working after the package re-layout: the vendor interface for
backend packages in other distributions, the console script, and the vendors' entry points."""

from __future__ import annotations

from importlib.metadata import entry_points

import dra_driver.backend.interface as interface
import dra_driver.vendor as public


def test_the_vendor_interface_is_importable_from_its_public_path() -> None:
    for name in ("VendorBackend", "BackendSettings", "ClaimRef", "AllocatedDevice", "PreparedClaim", "ContainerEdits"):
        assert getattr(public, name) is getattr(interface, name)


def test_the_console_script_and_every_vendor_entry_point_load() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "dra-driver"]
    assert callable(script.load())
    vendors = {e.name: e.load() for e in entry_points(group="dra_driver.vendors")}
    assert {"nvidia", "amd", "gaudi"} <= set(vendors)
    assert all(issubclass(backend, interface.VendorBackend) for backend in vendors.values())
