"""`dra-driver demo`: the whole claim-to-container flow on a laptop, no cluster and no GPU.

It runs the real daemon on a simulated hardware profile against an in-process
API server (where it publishes its ResourceSlices), plays the scheduler
(allocates an example claim from those slices with the allocator that
`explain` uses) and plays the kubelet over the real unix socket: register
(GetInfo), NodePrepareResources, show the CDI spec and what a container would
get, then NodeUnprepareResources and show the cleanup.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from dra_driver.common.wording import plural
from dra_driver.kube.k8s import client
from dra_driver.simulation import scratch as sim_scratch

from dra_driver.common import suggest
from dra_driver.node.daemon import Daemon
from dra_driver.common.errors import DraError, UsageError
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.cli.demo_scheduler import allocate, claim_object, wait_for_pool
from dra_driver.sources.classes import shipped_class_documents
from dra_driver.kube.claims import ClaimReader
from dra_driver.kube.client import JsonApi
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.backend.registry import open_backends
from dra_driver.backend.interface import BackendSettings, ClaimRef, VendorBackend
from dra_driver.backend.vocabulary import VENDOR_ALIASES

NODE = "demo-node"
SHOWN_MOUNTS = 3  # of the ~30 driver-file mounts of an NVIDIA spec, the ones shown
NAMESPACE = "default"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        description="The whole claim-to-container flow on simulated hardware, no cluster, no GPU, no root: the real daemon publishes "
        "a profile's devices to an in-process API server, the demo allocates an example claim from them as the scheduler would, "
        "then prepares and unprepares it over the plugin's real socket as the kubelet would, and shows the CDI spec in between.",
    )
    parser.add_argument("--profile", default="dgx-h100", help="hardware profile to simulate (default dgx-h100)")
    parser.add_argument("--vendor", default=None, help="which vendor of the profile to use (default: the first one found)")
    parser.add_argument(
        "--count", type=int, default=None, help="devices to allocate to the example claim (default: 2, or 1 when the profile has one)"
    )
    parser.add_argument("--partitioning", choices=("static", "dynamic"), default="static",
                        help="as run's: dynamic publishes every MIG placement / AMD partition mode, and the demo then asks for a "
                        "partition, created at prepare (default: %(default)s)")  # fmt: skip
    parser.add_argument("--device-class", default=None, metavar="NAME",
                        help="the example claim's DeviceClass (default: the first shipped class of the vendor that the profile's "
                        "devices can satisfy: the whole device, else a partition; with --partitioning dynamic a partition first)")  # fmt: skip
    parser.add_argument("--work-dir", type=Path, default=None, help="where the kubelet and CDI dirs go (default: a new temp dir, removed afterwards)")
    parser.set_defaults(func=run_demo)


@contextmanager
def _work_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    # Short path on purpose: unix socket paths are limited to 107 bytes. A scratch dir like the simulated
    # backends' (dra-demo-sim-<pid>-*): removed on SIGTERM too, and reaped by a later demo after SIGKILL.
    with sim_scratch.create("demo", Path("/tmp")) as scratch:
        yield scratch.path


def run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    import sys

    out = out or sys.stdout
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    profile = load_profile(args.profile)
    settings = BackendSettings(node_name=NODE, partitioning=args.partitioning)
    opened = open_backends(settings, profile, [profile_vendor(profile.name, sorted(profile.sections), args.vendor)] if args.vendor else None)
    if not opened.backends:
        reasons = "; ".join(str(p) for p in opened.unavailable) or f"profile {profile.name} describes no installed vendor"
        opened.close()
        raise DraError(f"nothing to simulate: {reasons}")
    try:
        with _work_dir(args.work_dir) as work, SimApiServer() as server:
            return _demo(opened.backends[0], profile.name, Wish(args.count, args.device_class, args.partitioning), work, server, out)
    finally:
        opened.close()


def profile_vendor(profile: str, sections: list[str], given: str) -> str:
    """The backend of `--vendor` (intel is gaudi's vendor name), which the profile must describe; UsageError saying what to pick."""
    name = "gaudi" if given.lower() == "intel" else given.lower()
    if name not in VENDOR_ALIASES:
        raise UsageError(f"--vendor {given}: {suggest.unknown('vendor', given, VENDOR_ALIASES)}")
    if name not in sections:
        raise UsageError(f"--vendor {given}: profile {profile} has no {name} devices (it has {', '.join(sections)}); "
                         f"drop --vendor, or pick a profile with {name} devices (`dra-driver profiles` lists them)")  # fmt: skip
    return name


@dataclass(frozen=True)
class Wish:
    """What the demo's claim asks for: given by flags, or (None) chosen from what the profile publishes."""

    count: int | None
    device_class: str | None
    partitioning: str = "static"


@dataclass(frozen=True)
class Request:
    """The demo's claim: `count` devices of `device_class`, and what the scheduler chose on the demo node."""

    device_class: str
    count: int
    allocation: dict[str, Any]
    chosen: list[str]


def class_candidates(driver: str, partitioning: str) -> list[str]:
    """The shipped DeviceClasses of `driver`'s vendor the demo tries, in order: the whole device (the class named after
    the driver), then the generic partition classes (`mig.nvidia.com`, `partition.gpu.amd.com`), specific MIG
    profiles last; partitions first with dynamic partitioning, which exists to hand them out."""
    domain = ".".join(driver.split(".")[-2:])
    names = sorted(
        (str(doc.get("metadata", {}).get("name") or "") for doc in shipped_class_documents()),
        key=lambda name: (len(name.split(".")[0].split("-")), name),  # mig.nvidia.com before mig-1g.10gb.nvidia.com
    )
    partitions = [name for name in names if name != driver and name.endswith("." + domain) and not name.startswith("extended.")]
    return [*partitions, driver] if partitioning == "dynamic" else [driver, *partitions]


def choose_request(driver: str, slices: list[dict[str, Any]], wish: Wish) -> Request:
    """The first candidate class (or the one asked) that the published devices can satisfy, with `wish.count` devices,
    or by default 2 (1 when only one fits); DraError naming what was tried."""
    classes = [wish.device_class] if wish.device_class else class_candidates(driver, wish.partitioning)
    problems = []
    for device_class in classes:
        for count in [wish.count] if wish.count is not None else [2, 1]:
            try:
                allocation, chosen = allocate(claim_object("demo-claim", NAMESPACE, device_class, count), slices, NODE)
            except DraError as exc:
                problems.append(f"{count} x {device_class}: {exc}")
                continue
            return Request(device_class, count, allocation, chosen)
    raise DraError(f"no example claim fits the simulated node: {'; '.join(problems[:4])}")


def _demo(backend: VendorBackend, profile: str, wish: Wish, work: Path, server: SimApiServer, out: TextIO) -> int:
    def say(text: str = "") -> None:
        print(text, file=out)

    settings = PluginSettings(node_name=NODE, kubelet_dir=work / "kubelet", cdi_dir=work / "cdi", state_dir=work / "state")
    api = server.api_client()  # the typed client: the claim's status is written as the scheduler writes it
    json_api = JsonApi.of(api)  # the daemon's transport, on the same pool
    json_api.request("POST", "/api/v1/nodes", body={"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    daemon = Daemon([backend], ClaimReader(json_api), settings, publisher_factory=publisher_factory(json_api, NODE))
    status = daemon.start()
    if not status.running:
        raise DraError(f"the daemon could not start {backend.driver_name}: {status.failed}")
    try:
        plugin = daemon.plugins[backend.driver_name]
        slices = wait_for_pool(json_api, backend.driver_name, NODE)
        request = choose_request(backend.driver_name, slices, wish)
        say("== What you write: a ResourceClaimTemplate (which devices) and a Pod that uses it")
        say(_indent(_user_side(request.device_class, request.count)))
        say("   The scheduler makes a ResourceClaim from the template and allocates it from the ResourceSlices the driver")
        say("   publishes; the kubelet asks the driver to prepare it. Below, this demo plays scheduler and kubelet.")
        inventory = backend.discover()
        say(f"== Simulated node '{NODE}' (profile {profile}): {plural(len(inventory.devices), backend.driver_name + ' device')}")
        for device in inventory.devices[:12]:
            say(f"   {device.name}")
        if len(inventory.devices) > 12:
            say(f"   ... and {len(inventory.devices) - 12} more")
        say(f"== Plugin sockets under {settings.kubelet_dir}")
        say(f"   registration: {plugin.paths.registration_socket}")
        say(f"   DRA service:  {plugin.paths.dra_socket}")

        say(f"== Published {plural(len(slices), 'ResourceSlice')} for pool {NODE} through the API server")
        claim = _create_and_allocate(api, request)
        say(
            f"== ResourceClaim {NAMESPACE}/{claim.name} (uid {claim.uid}), as made from the template: {request.count} x DeviceClass "
            f"{request.device_class}"
        )
        say(f"   allocated from the published slices: request 'gpus' -> {', '.join(request.chosen)}")

        conn = register(plugin.paths.registration_socket)
        say("== Kubelet registration (GetInfo)")
        say(f"   type={conn.info.type} name={conn.info.name}")
        say(f"   endpoint={conn.info.endpoint}")
        say(f"   supported_versions={list(conn.info.supported_versions)} -> kubelet uses {conn.service}")

        response = conn.prepare([claim])
        entry = response.claims[claim.uid]
        if entry.error:
            raise DraError(f"NodePrepareResources failed: {entry.error}")
        say("== NodePrepareResources answer")
        for device in entry.devices:
            say(f"   {device.pool_name}/{device.device_name} request={list(device.request_names)} cdi={list(device.cdi_device_ids)}")
        record = plugin.service.checkpoint_record(claim.uid)
        if record is None or not record.cdi_spec:
            raise DraError(f"NodePrepareResources answered, but the driver recorded no CDI spec for claim {claim.uid}")
        spec_path = Path(record.cdi_spec)
        spec = json.loads(spec_path.read_text())
        say(f"== CDI spec {spec_path} (driver-file mounts folded)")
        say(_indent(json.dumps(_folded(spec), indent=2)))
        say("== What a container using this claim gets (resolved from the CDI spec)")
        _describe_container(spec, [i for d in entry.devices for i in d.cdi_device_ids], say)

        unprepared = conn.unprepare([claim])
        if unprepared.claims[claim.uid].error:
            raise DraError(f"NodeUnprepareResources failed: {unprepared.claims[claim.uid].error}")
        say("== NodeUnprepareResources: done")
        say(
            f"   CDI spec file {'still exists (unexpected!)' if spec_path.exists() else 'removed'}; claims still prepared: "
            f"{plugin.service.prepared_device_count()} devices"
        )
        conn.close()
    finally:
        daemon.stop()
    left = [p for p in (plugin.paths.registration_socket, plugin.paths.dra_socket) if p.exists()]
    say(f"== Daemon stopped; {'sockets left behind: ' + ', '.join(map(str, left)) if left else 'its sockets were removed'}.")
    return 0


def _create_and_allocate(api: client.ApiClient, request: Request) -> ClaimRef:
    """Create the claim through the real kubernetes client and write the allocation chosen before creating it (a claim
    that cannot be allocated is not left behind) as status.allocation, as the scheduler does."""
    body = claim_object("demo-claim", NAMESPACE, request.device_class, request.count)
    created = JsonApi.of(api).request("POST", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", body=body)
    meta = created["metadata"]
    client.ResourceV1Api(api).patch_namespaced_resource_claim_status(
        meta["name"], NAMESPACE, {"status": {"allocation": request.allocation}}, _content_type="application/merge-patch+json"
    )
    return ClaimRef(NAMESPACE, meta["name"], meta["uid"])



def _describe_container(spec: dict[str, Any], cdi_ids: list[str], say: Any) -> None:
    wanted = {i.split("=", 1)[1] for i in cdi_ids}
    edits = [d["containerEdits"] for d in spec["devices"] if d["name"] in wanted]
    if spec.get("containerEdits"):
        edits.append(spec["containerEdits"])
    env = [e for edit in edits for e in edit.get("env", [])]
    nodes = list({n["path"]: n for edit in edits for n in edit.get("deviceNodes", [])}.values())  # shared nodes once
    mounts = [m for edit in edits for m in edit.get("mounts", [])]
    hooks = [h for edit in edits for h in edit.get("hooks", [])]
    say("   environment:")
    for item in env or ["(none)"]:
        say(f"     {item}")
    say("   device nodes:")
    for node in nodes:
        say(f"     {node.get('hostPath', node['path'])} -> {node['path']}")
    if not nodes:
        say("     (none)")
    if mounts:
        say(f"   mounts: {len(mounts)}" + (", for example:" if len(mounts) > SHOWN_MOUNTS else ":"))
        for mount in mounts[:SHOWN_MOUNTS]:
            say(f"     {mount['hostPath']} -> {mount['containerPath']} {','.join(mount.get('options', []))}")
    if hooks:
        say("   hooks:")
        for hook in hooks:
            say(f"     {hook['hookName']}: {hook['path']} {' '.join(hook.get('args', []))}")


def _user_side(device_class: str, count: int) -> str:
    """The two objects a user writes for the demo's claim: its template and a pod referring to it."""
    template = claim_object("gpus", NAMESPACE, device_class, count)
    template = {
        "apiVersion": template["apiVersion"],
        "kind": "ResourceClaimTemplate",
        "metadata": template["metadata"],
        "spec": {"spec": template["spec"]},
    }
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo", "namespace": NAMESPACE},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}],
            "containers": [{"name": "app", "image": "ubuntu:24.04", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }  # fmt: skip
    return "---\n".join(yaml.safe_dump(obj, sort_keys=False) for obj in (template, pod)).rstrip()


def _folded(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with each long `mounts` list cut to a few entries and a count (the driver files repeat per spec)."""
    def fold(edits: dict[str, Any]) -> dict[str, Any]:
        mounts = edits.get("mounts") or []
        if len(mounts) <= SHOWN_MOUNTS:
            return edits
        return {**edits, "mounts": [*mounts[:SHOWN_MOUNTS], f"... {len(mounts) - SHOWN_MOUNTS} more driver-file mounts"]}

    out = {**spec, "devices": [{**device, "containerEdits": fold(device.get("containerEdits") or {})} for device in spec.get("devices") or []]}
    if spec.get("containerEdits"):
        out["containerEdits"] = fold(spec["containerEdits"])
    return out


def _indent(text: str) -> str:
    return "\n".join(f"   {line}" for line in text.splitlines())
