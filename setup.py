"""Package map: the core lives in dra_driver/, each vendor in vendors/<name>/.

Each vendor directory installs as its own namespaced import package
(dra_driver_nvidia, dra_driver_amd, dra_driver_gaudi), never as a generic
top-level name such as `vendors`. Everything else is in pyproject.toml.
"""

from __future__ import annotations

from setuptools import find_packages, setup

VENDOR_DIRS = {f"dra_driver_{name}": f"vendors/{name}" for name in ("nvidia", "amd", "gaudi")}


def _packages() -> list[str]:
    packages = find_packages(include=["dra_driver", "dra_driver.*"])
    for package, path in VENDOR_DIRS.items():
        packages.append(package)
        packages.extend(f"{package}.{sub}" for sub in find_packages(path))
    return packages


setup(packages=_packages(), package_dir=dict(VENDOR_DIRS))
