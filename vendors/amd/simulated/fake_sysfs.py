"""The sysfs entries a simulated AMD node needs: PCI device links under their host bridge."""

from __future__ import annotations

import os
from pathlib import Path

from dra_driver.backend.sysfs import pci_device_dir

from dra_driver_amd.profile import AmdProfile


def build_pci_tree(root: Path, profile: AmdProfile) -> None:
    """Create <root>/devices/<pcie_root>/<bdf> (with product_name where the model has one) and the
    bus/pci/devices/<bdf> symlink per GPU."""
    for gpu in profile.gpus:
        if not gpu.pcie_root:
            continue
        device_dir = root / "devices" / gpu.pcie_root / gpu.bdf
        device_dir.mkdir(parents=True, exist_ok=True)
        product = profile.models[gpu.model].sysfs_product_name
        if product is not None:
            (device_dir / "product_name").write_text(product + "\n")
        link = pci_device_dir(root, gpu.bdf)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.symlink(os.path.relpath(device_dir, link.parent), link)
