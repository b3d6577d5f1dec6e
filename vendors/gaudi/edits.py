"""Container edits for allocated Gaudi devices (Intel's cdihelpers, docs.habana.ai).

Per device: its accel compute and control nodes and, when present, the RoCE
verbs node. Per claim: the Habana runtime's environment (which devices and
modules the container sees), the habana-container-hook and gaudinet.json.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.backend.interface import BackendSettings, ContainerEdits, DeviceNode, Hook, Mount

from dra_driver_gaudi.discovery import GaudiDevice

# Host paths relative to the host root (settings.driver_root), in the order the
# runtime looks for them: the standard package, then the OpenShift operator's.
HOOK_PATHS = ("usr/bin/habana-container-hook", "usr/local/habana/bin/habana-container-hook")
GAUDINET = "etc/habanalabs/gaudinet.json"
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)


def device_edits(device: GaudiDevice, settings: BackendSettings) -> ContainerEdits:
    paths = [f"/dev/accel/accel{device.accel_index}", f"/dev/accel/accel_controlD{device.accel_index}"]
    if device.uverbs_index is not None:
        paths.append(f"/dev/infiniband/uverbs{device.uverbs_index}")
    return ContainerEdits(device_nodes=[DeviceNode.under(path, settings.dev_root, type="c") for path in paths])


def _joined(values: Sequence[object]) -> str:
    return ",".join(str(value) for value in values)


def _hook(settings: BackendSettings) -> Hook | None:
    for relative in HOOK_PATHS:
        if (settings.driver_root / relative).is_file():
            # The runtime runs the hook on the host, so the spec names the host path.
            return Hook(hook_name="createRuntime", path=f"/{relative}", args=("habana-container-hook", "createRuntime"), env=HOOK_ENV)
    return None


def visibility_edits(devices: Sequence[GaudiDevice]) -> ContainerEdits:
    """The env vars naming one request's devices as a set (PreparedClaim.request_edits).

    Per request, not per claim: the kubelet hands a container only the devices of
    the requests it names, and a list spanning requests would expose the others.
    """
    by_index = sorted({d.name: d for d in devices}.values(), key=lambda device: device.accel_index)
    return ContainerEdits(
        env=[
            f"HABANA_VISIBLE_DEVICES={_joined([d.accel_index for d in by_index])}",
            f"HABANA_VISIBLE_MODULES={_joined(sorted(d.module_id for d in by_index))}",
            f"HL_VISIBLE_DEVICES={_joined([f'/dev/accel/accel{d.accel_index}' for d in by_index])}",
        ]
    )


def claim_edits(settings: BackendSettings) -> ContainerEdits:
    """What every container using the claim gets once: the runtime hook and the GaudiNet file."""
    edits = ContainerEdits()
    hook = _hook(settings)
    if hook is not None:
        edits.hooks.append(hook)
    if (settings.driver_root / GAUDINET).is_file():
        path = f"/{GAUDINET}"
        edits.mounts.append(Mount(host_path=path, container_path=path, options=("ro", "nosuid", "nodev", "bind")))
    return edits
