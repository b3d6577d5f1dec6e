"""Opening amdsmi: missing package, missing libamd_smi.so (KeyError + stdout), no GPUs, init failure."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

from dra_driver.common.errors import BackendUnavailable
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings

from dra_driver_amd.backend import AmdBackend
from dra_driver_amd.simulated.fake_amdsmi import AmdSmiLibraryException, FakeAmdSmi
from dra_driver_amd.profile import parse_profile


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes `import amdsmi` run `body` as the module's code."""

    def __init__(self, body: Callable[[ModuleType], None]) -> None:
        self.body = body

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001
        if fullname == "amdsmi":
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):  # noqa: ANN001
        return None

    def exec_module(self, module: ModuleType) -> None:
        self.body(module)


@pytest.fixture
def amdsmi_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[ModuleType], None]], None]]:
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    finders: list[_Finder] = []

    def install(body: Callable[[ModuleType], None]) -> None:
        finder = _Finder(body)
        finders.append(finder)
        sys.meta_path.insert(0, finder)

    yield install
    for finder in finders:
        sys.meta_path.remove(finder)
    sys.modules.pop("amdsmi", None)


def _missing_library(module: ModuleType) -> None:
    # What amdsmi 7.0.2 does on a host without libamd_smi.so.
    print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory")
    print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
    raise KeyError("libamd_smi.so")


def test_missing_library_is_a_plain_reason_and_prints_nothing(amdsmi_import, capsys):
    amdsmi_import(_missing_library)
    with pytest.raises(BackendUnavailable) as info:
        AmdBackend.from_host(BackendSettings())
    assert info.value.vendor == "amd"
    assert info.value.reason.startswith("libamd_smi.so not found")
    assert capsys.readouterr().out == ""


def test_package_not_installed(amdsmi_import):
    def absent(module: ModuleType) -> None:
        raise ModuleNotFoundError("No module named 'amdsmi'", name="amdsmi")

    amdsmi_import(absent)
    with pytest.raises(BackendUnavailable, match=r"amdsmi Python package not installed \(pip install dra-driver\[amd\]\)"):
        AmdBackend.from_host(BackendSettings())


def test_os_error_while_loading_is_reported_as_missing_library(amdsmi_import):
    def broken(module: ModuleType) -> None:
        raise OSError("libamd_smi.so: wrong ELF class")

    amdsmi_import(broken)
    with pytest.raises(BackendUnavailable, match="libamd_smi.so not found"):
        AmdBackend.from_host(BackendSettings())


def _fake_module(profile_name: str, gpus: int | None = None) -> Callable[[ModuleType], None]:
    section = dict(load_profile(profile_name).sections["amd"])
    if gpus is not None:
        section["gpus"] = section["gpus"][:gpus]
    fake = FakeAmdSmi(parse_profile(section))

    def body(module: ModuleType) -> None:
        for name in dir(fake):
            if name.startswith(("amdsmi_", "AmdSmi")):
                setattr(module, name, getattr(fake, name))

    return body


def test_from_host_with_a_working_library(amdsmi_import, tmp_path):
    amdsmi_import(_fake_module("mi210"))
    backend = AmdBackend.from_host(BackendSettings(sysfs_root=tmp_path))
    try:
        devices = backend.discover().devices
        assert len(devices) == 4
        # No sysfs PCI tree here: pcieRoot is left out rather than guessed.
        assert all("resource.kubernetes.io/pcieRoot" not in d.attributes for d in devices)
    finally:
        backend.close()


def test_no_gpus(amdsmi_import):
    amdsmi_import(_fake_module("mi210", gpus=0))
    with pytest.raises(BackendUnavailable, match="no AMD GPUs"):
        AmdBackend.from_host(BackendSettings())


def test_init_failure_names_the_driver(amdsmi_import):
    def failing_init(module: ModuleType) -> None:
        _fake_module("mi210")(module)

        def amdsmi_init(flag=None):  # noqa: ANN001
            raise AmdSmiLibraryException(34)  # AMDSMI_STATUS_INIT_ERROR

        module.amdsmi_init = amdsmi_init

    amdsmi_import(failing_init)
    with pytest.raises(BackendUnavailable, match="amdsmi_init failed.*amdgpu kernel driver"):
        AmdBackend.from_host(BackendSettings())


def test_unreadable_gpu_is_skipped(open_backend):
    backend = open_backend("mi210")
    fake = backend.library
    original = fake.amdsmi_get_gpu_asic_info

    def flaky(handle):  # noqa: ANN001
        if handle.gpu_bdf == "0000:23:00.0":
            raise AmdSmiLibraryException(8)  # AMDSMI_STATUS_DRM_ERROR
        return original(handle)

    fake.amdsmi_get_gpu_asic_info = flaky
    bdfs = [d.attributes["resource.kubernetes.io/pciBusID"] for d in backend.discover().devices]
    assert bdfs == ["0000:03:00.0", "0000:43:00.0", "0000:63:00.0"]


def test_profile_errors_name_the_field():
    from dra_driver.common.errors import ProfileError

    section = dict(load_profile("mi210").sections["amd"])
    section["gpus"] = [dict(section["gpus"][0], bdf="0000:3:0.0")]
    with pytest.raises(ProfileError, match=r"amd\.gpus\.0\.bdf"):
        parse_profile(section)
    section = dict(load_profile("mi210").sections["amd"])
    section["gpus"] = [dict(section["gpus"][0], modle="x")]
    with pytest.raises(ProfileError, match=r"amd\.gpus\.0\.modle"):
        parse_profile(section)
    section = dict(load_profile("mi210").sections["amd"])
    section["gpus"] = [dict(section["gpus"][0], model="mi999")]
    with pytest.raises(ProfileError, match="mi999"):
        parse_profile(section)


def test_profile_rejects_overlapping_drm_minors_naming_the_field():
    from dra_driver.common.errors import ProfileError

    section = dict(load_profile("mi300x").sections["amd"])
    # MI300X has up to 8 partitions (CPX), so render 128 and 129 overlap.
    section["gpus"] = [dict(gpu, render=128 + i, card=8 * i) for i, gpu in enumerate(section["gpus"])]
    with pytest.raises(ProfileError, match=r"gpus\[1\]\.render 129 overlaps gpus\[0\]\.render 128"):
        parse_profile(section)
    section["gpus"] = [dict(gpu, render=128 + 8 * i, card=i) for i, gpu in enumerate(section["gpus"])]
    with pytest.raises(ProfileError, match=r"gpus\[1\]\.card 1 overlaps gpus\[0\]\.card 0"):
        parse_profile(section)
    # CDNA2 has no partitions: consecutive minors are fine.
    mi210 = dict(load_profile("mi210").sections["amd"])
    mi210["gpus"] = [dict(gpu, render=128 + i, card=i) for i, gpu in enumerate(mi210["gpus"])]
    parse_profile(mi210)
