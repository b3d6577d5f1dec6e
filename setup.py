"""Package map: the core lives in dra_driver/, each vendor in vendors/<name>/.

Each vendor directory installs as its own namespaced import package
(dra_driver_nvidia, dra_driver_amd, dra_driver_gaudi), never as a generic
top-level name such as `vendors`; deviceclasses/ installs as dra_driver_deviceclasses
(data only). Everything else is in pyproject.toml.
"""

from __future__ import annotations

from setuptools import find_packages, setup

VENDOR_DIRS = {f"dra_driver_{name}": f"vendors/{name}" for name in ("nvidia", "amd", "gaudi")}
# The shipped DeviceClass YAMLs travel as package data so `explain` finds them in any install.
DATA_DIRS = {"dra_driver_deviceclasses": "deviceclasses"}


def _packages() -> list[str]:
    packages = find_packages(include=["dra_driver", "dra_driver.*"])
    for package, path in VENDOR_DIRS.items():
        packages.append(package)
        packages.extend(f"{package}.{sub}" for sub in find_packages(path))
    packages.extend(DATA_DIRS)
    return packages


setup(packages=_packages(), package_dir={**VENDOR_DIRS, **DATA_DIRS})
