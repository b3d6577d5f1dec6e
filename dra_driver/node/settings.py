"""Every setting of `dra-driver run`, declared once: its flag, its environment variable, its default and its help.

argparse is built from this table (`add_arguments`), and tests/deploy/test_settings_table.py checks the
DaemonSet's ConfigMap and environment and docs/install.md's settings table against it. Each setting is read
from `DRA_DRIVER_<NAME>` when its flag is not given (the ConfigMap `dra-driver-config` and the downward API
set them in a pod); a flag wins over the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_driver.node.device_metrics import DEFAULT_INTERVAL_S as DEVICE_METRICS_INTERVAL_S, MIN_INTERVAL_S as DEVICE_METRICS_MIN_S
from dra_driver.node.metrics_http import BindAddress

if TYPE_CHECKING:  # annotation only: parsing the settings needs no backend (or pydantic) import
    from dra_driver.backend.interface import Partitioning

ENV_PREFIX = "DRA_DRIVER_"
DEFAULT_KUBELET_DIR = Path("/var/lib/kubelet")
# Runtime state (checkpoint, locks, backend records): a tmpfs on nodes, cleared by a reboot that voids it anyway.
DEFAULT_STATE_DIR = Path("/var/run/dra-driver")
NO_SIMULATED_ROOT = "none"
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no", "")


@dataclass(frozen=True)
class Setting:
    """How one DaemonSettings field is given: `parse` turns the flag's or the environment's text into the value."""

    help: str
    default_text: str  # the default as --help and docs/install.md show it
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    boolean: bool = False  # --flag / --no-flag; the environment takes true/false


def _setting(default: Any, help: str, default_text: str | None = None, **how: Any) -> Any:
    return field(default=default, metadata={"setting": Setting(help, default_text if default_text is not None else str(default), **how)})


def _simulated_root(text: str) -> Path | str:
    return NO_SIMULATED_ROOT if text == NO_SIMULATED_ROOT else Path(text)


def _bind_address(text: str) -> BindAddress:
    return BindAddress.parse(text)


def _device_metrics_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value != 0 and not (DEVICE_METRICS_MIN_S <= value <= 3600):
        raise ValueError(f"{text!r}: give seconds between {DEVICE_METRICS_MIN_S:g} and 3600, or 0 to turn device readings off")
    return value


def _boolean(text: str) -> bool:
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise ValueError(f"{text!r} is not true or false")


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r}: use one of {', '.join(choices)}")
        return text

    return parse


_MPS_MODES = ("exclusive-process", "unchanged")
_PARTITIONING = ("static", "dynamic")


@dataclass(frozen=True)
class DaemonSettings:
    """The settings `dra-driver run` builds its daemon from (dra_driver.node.assembly)."""

    node_name: str = _setting("", "this node's name, the pool name claims must match", "the host name")
    kubelet_dir: Path = _setting(DEFAULT_KUBELET_DIR, "kubelet root dir", parse=Path)
    cdi_dir: Path = _setting(Path("/var/run/cdi"), "where CDI specs are written", parse=Path)
    state_dir: Path = _setting(
        DEFAULT_STATE_DIR, "runtime state that is void after a reboot, best on a tmpfs: each driver's checkpoint and locks "
        "(<state-dir>/<driver>/) and backend records such as the MIG instances the driver created", parse=Path,
    )  # fmt: skip
    kubeconfig: str | None = _setting(None, "kubeconfig file", "as kubectl: $KUBECONFIG, ~/.kube/config, then the in-cluster service account")
    context: str | None = _setting(None, "the kubeconfig context to use", "its current-context")
    api_server: str | None = _setting(None, "API server base URL without auth (tests, kubectl proxy)", "none")
    vendors: str | None = _setting(None, "comma-separated vendors", "every installed backend that finds hardware")
    profile: str | None = _setting(None, "simulate this hardware profile instead of the real hardware", "none")
    partitioning: Partitioning = _setting(
        "static", "static: publish the GPUs and the partitions that exist (MIG devices, AMD partitions) as they are; dynamic: publish "
        "every MIG placement and AMD partition mode with shared counters, and create the partition a claim was given at prepare "
        "(needs the DRAPartitionableDevices gate)", parse=_one_of(_PARTITIONING), choices=_PARTITIONING,
    )  # fmt: skip
    simulated_root: Path | str | None = _setting(
        None, "needed with --profile: a host path, mounted at the same path in the pod, for the simulated device nodes "
        "(character nodes with /dev/null's numbers) and driver files the CDI specs name, kept while prepared claims use it "
        "(deploy/overlays/simulated uses /var/run/dra-driver-sim); or 'none' where no container runtime reads the specs "
        "(tests, benchmarks): the simulation's files then stay in its private scratch dir", "unset", parse=_simulated_root, metavar="PATH|none",
    )  # fmt: skip
    metrics_bind_address: BindAddress = _setting(
        BindAddress.parse("0"), "serve /metrics, /readyz and /livez here: 127.0.0.1:8080, :8080 for every address of the pod (or, "
        "with host networking, of the node), 0 for off; a busy port is retried in the background", "0 (off)",
        parse=_bind_address, metavar="HOST:PORT",
    )  # fmt: skip
    device_metrics_interval: float = _setting(
        DEVICE_METRICS_INTERVAL_S, "read each device's utilization, memory, power, temperature and error counters this often while "
        "metrics are served (docs/metrics.md); 0 turns the device readings off", parse=_device_metrics_interval, metavar="SECONDS",
    )  # fmt: skip
    pod_uid: str | None = _setting(None, "per-pod socket names for rolling updates (the pod's metadata.uid)", "none")
    driver_root: Path = _setting(
        Path("/"), "where the host's vendor driver files are mounted; the NVIDIA backend loads libnvidia-ml.so.1 from there", parse=Path,
    )  # fmt: skip
    host_driver_root: Path | None = _setting(
        None, "the driver root as the host's container runtime sees it, for paths in CDI specs: / or a GPU Operator root such "
        "as /run/nvidia/driver", "the --driver-root value", parse=Path,
    )  # fmt: skip
    nvidia_cdi_hook_path: str | None = _setting(
        None, "host path of NVIDIA's CDI hook (nvidia-cdi-hook, or nvidia-ctk): specs then create the soname links and update "
        "the container's linker cache through it; without it each library is also mounted at its soname path", "none",
    )  # fmt: skip
    pod_resources_socket: Path | None = _setting(
        None, "the kubelet's PodResources socket, read to find device plugins and the pods holding their devices",
        "<kubelet-dir>/pod-resources/kubelet.sock", parse=Path,
    )  # fmt: skip
    offer_devices: str | None = _setting(
        None, "comma-separated device names, UUIDs or PCI bus IDs this driver offers even though a device plugin of its vendor "
        "runs on the node (a deliberate split: configure the device plugin to leave them alone); devices a device-plugin pod "
        "holds are never offered", "none: every device a device plugin hands out is withheld",
    )  # fmt: skip
    mps_compute_mode: str = _setting(
        "exclusive-process", "what an MPS claim does to the compute mode of a GPU it holds alone: exclusive-process switches it to "
        "EXCLUSIVE_PROCESS (only the MPS server opens the GPU) and back on unprepare, as NVIDIA's driver does; "
        "unchanged never touches it", parse=_one_of(_MPS_MODES), choices=_MPS_MODES,
    )  # fmt: skip
    consumable_gpu_memory: bool = _setting(
        False, "publish whole NVIDIA GPUs with allowMultipleAllocations and a `memory` request policy (default: the whole "
        "memory, min 1Gi, step 1Mi), so several claims share one GPU, each held to its share through its own MPS control "
        "daemon; needs the DRAConsumableCapacity feature gate (falls back to one claim per GPU without it)", "off", boolean=True,
    )  # fmt: skip
    claim_cache: bool = _setting(
        False, "serve prepare from a LIST+WATCH cache of allocated ResourceClaims (all namespaces) instead of one GET per claim; "
        "falls back to a GET whenever the cache is not sure (needs list/watch on resourceclaims)", "off", boolean=True,
    )  # fmt: skip

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> DaemonSettings:
        return cls(**{name: getattr(args, name) for name in setting_names()})


def settings() -> Iterator[tuple[str, Setting]]:
    """(field name, Setting) of every daemon setting, in declaration order."""
    for item in dataclasses.fields(DaemonSettings):
        yield item.name, item.metadata["setting"]


def setting_names() -> list[str]:
    return [name for name, _ in settings()]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _default(name: str, item: Setting, environ: Mapping[str, str]) -> Any:
    """The environment's text (parsed by argparse like a flag's, so a bad value is a usage error naming both), else the
    declared default; the node name falls back to the host name."""
    text = environ.get(env_name(name)) or None
    if item.boolean:
        return _boolean(text) if text is not None else DaemonSettings.__dataclass_fields__[name].default
    if text is not None:
        return text
    if name == "node_name":
        return socket.gethostname()
    return DaemonSettings.__dataclass_fields__[name].default


def _named(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_named(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({flag(name)} or ${env_name(name)})") from exc

    parse_named.__name__ = name  # argparse names the type in its error
    return parse_named


def add_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """One argparse flag per setting, its default from the environment (`environ`, default os.environ)."""
    environ = os.environ if environ is None else environ
    for name, item in settings():
        help_text = f"{item.help} (default: ${env_name(name)}, else {item.default_text})"
        try:
            default = _default(name, item, environ)
        except ValueError as exc:
            parser.error(f"${env_name(name)}: {exc}")
        if item.boolean:
            parser.add_argument(flag(name), dest=name, action=argparse.BooleanOptionalAction, default=default, help=help_text)
            continue
        parser.add_argument(
            flag(name), dest=name, default=default, help=help_text, metavar=item.metavar, choices=item.choices,
            type=_named(name, item.parse) if item.parse is not None else str,  # str: as argparse without a type
        )  # fmt: skip
