"""Finding and checking a cluster as kubectl does: --kubeconfig, $KUBECONFIG (merged), ~/.kube/config, in-cluster;
--context; one line naming the server when it is unreachable or lacks resource.k8s.io/v1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.kube.api_source import KubeConfigError, api_source, find_api_source
from dra_driver.kube.client import chosen_context, load_configuration
from dra_driver.kube.server_check import ClusterError, check_dra_served, without_retries
from dra_driver.simulation.api_server import ServerOptions, SimApiServer


def kubeconfig(path: Path, server: str, contexts: tuple[str, ...] = ("sim",), current: str | None = "sim") -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": f"c-{name}", "cluster": {"server": server}} for name in contexts],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": f"c-{name}", "user": "u"}} for name in contexts],
    }  # fmt: skip
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def test_order_is_flag_then_kubeconfig_env_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG")
    assert find_api_source() is None
    kubeconfig((home / ".kube").mkdir(parents=True) or home / ".kube" / "config", "http://home")
    assert find_api_source() is not None and find_api_source().origin == "~/.kube/config"  # type: ignore[union-attr]
    env = kubeconfig(tmp_path / "env", "http://env")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{env}")
    found = find_api_source()
    assert found is not None and (found.origin, found.files) == ("$KUBECONFIG", (str(env),))  # missing files are skipped
    flag = kubeconfig(tmp_path / "flag", "http://flag")
    assert api_source(kubeconfig=str(flag)).location == str(flag)
    assert load_configuration(kubeconfig=str(flag)).host == "http://flag"


def test_kubeconfig_list_merges_first_wins_and_context_picks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = kubeconfig(tmp_path / "a", "http://first", ("a", "shared"), current="a")
    second = kubeconfig(tmp_path / "b", "http://second", ("b", "shared"), current="b")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    source = api_source()
    assert chosen_context(source) == "a"  # the first current-context set wins, as kubectl (the client's merger takes the last)
    assert load_configuration(source=source).host == "http://first"
    assert load_configuration(context="b").host == "http://second"  # a context only the second file has
    assert load_configuration(context="shared").host == "http://first"  # the first file naming it wins


def test_unknown_context_suggests_close_ones(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", "http://x", ("prod", "staging"))
    with pytest.raises(KubeConfigError, match="--context prd: no such context .*did you mean 'prod'"):
        load_configuration(kubeconfig=str(path), context="prd")


def test_no_cluster_config_says_what_to_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(KubeConfigError, match=r"no cluster configured: .*\.kube/config does not exist.*pass --kubeconfig FILE"):
        api_source()
    with pytest.raises(KubeConfigError, match="--context x: no kubeconfig"):
        find_api_source(context="x")


def test_in_cluster_comes_after_the_kubeconfig_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dra_driver.kube.api_source as module

    token = tmp_path / "token"
    token.write_text("t")
    monkeypatch.setattr(module, "IN_CLUSTER_TOKEN", token)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert api_source().kind == "in-cluster"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "k", "http://x")))
    assert api_source().kind == "kubeconfig"


@pytest.fixture
def server_without(request: pytest.FixtureRequest) -> Iterator[SimApiServer]:
    with SimApiServer(ServerOptions(resource_versions=request.param)) as server:
        yield server


@pytest.mark.parametrize(
    ("server_without", "reason", "text"),
    [((), "dra-not-enabled", "does not serve the resource.k8s.io API: DRA is not enabled"),
     (("v1beta1", "v1beta2"), "wrong-version", "serves resource.k8s.io/v1beta1, resource.k8s.io/v1beta2, not resource.k8s.io/v1")],
    indirect=["server_without"],
)  # fmt: skip
def test_a_server_without_resource_v1_is_named_with_what_is_missing(server_without: SimApiServer, reason: str, text: str) -> None:
    with server_without.json_api() as api:
        with pytest.raises(ClusterError, match=text) as info:
            check_dra_served(api, server_without.url)
    assert info.value.reason == reason and info.value.permanent and server_without.url in str(info.value)


def test_a_server_with_resource_v1_passes() -> None:
    with SimApiServer() as server, server.json_api() as api:
        check_dra_served(api, server.url)


def test_an_unreachable_server_is_one_quick_line_without_retry_warnings(caplog: pytest.LogCaptureFixture) -> None:
    from kubernetes import client

    from dra_driver.kube.client import JsonApi

    configuration = without_retries(client.Configuration(host="http://127.0.0.1:1"))
    with JsonApi(configuration) as api, pytest.raises(ClusterError, match=r"API server http://127.0.0.1:1: unreachable \(.*refused") as info:
        check_dra_served(api, "http://127.0.0.1:1")
    assert not info.value.permanent and "\n" not in str(info.value)
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


@pytest.mark.parametrize("server_without", [("v1beta1",)], indirect=True)
def test_run_checks_a_url_without_importing_the_kubernetes_client(server_without: SimApiServer) -> None:
    """run checks the server before it serves the kubelet: for a URL or in-cluster that costs no client import."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dra_driver.kube.api_source import ApiSource\n"
        "from dra_driver.kube.server_check import ClusterError, check_source\n"
        f"try:\n    check_source(ApiSource('url', {server_without.url!r}))\n"
        "except ClusterError as exc:\n    print(exc.reason)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["wrong-version", "[]"]


def test_in_cluster_check_uses_the_service_address_token_and_ca(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dra_driver.kube.server_check as server_check
    from dra_driver.kube.api_source import ApiSource

    token = tmp_path / "token"
    token.write_text("secret\n")
    seen: dict[str, Any] = {}

    def fake_fetch(url: str, bearer: str | None = None, ca_file: str | None = None) -> Any:
        seen.update(url=url, token=bearer, ca=ca_file)
        return lambda path: (200, b'{"versions": [{"version": "v1"}]}')

    monkeypatch.setattr(server_check, "IN_CLUSTER_TOKEN", token)
    monkeypatch.setattr(server_check, "plain_fetch", fake_fetch)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    server_check.check_source(ApiSource("in-cluster"))
    assert seen == {"url": "https://[fd00::1]:6443", "token": "secret", "ca": None}
