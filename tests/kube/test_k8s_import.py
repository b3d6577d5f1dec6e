"""dra_driver.kube.k8s: the kubernetes client without the package `__init__`s that import all of it.

Checked against the installed (pinned) kubernetes package: what the driver uses loads without kubernetes.dynamic,
kubernetes.stream and the kubeconfig loader's dependencies; anything else still reaches the whole package, which
then looks as it does without the deferral; every module of the driver imports the package through k8s."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What `import kubernetes` loads that the driver's API access does not need (docs/performance.md, "Memory over cycles").
NOT_NEEDED = ("kubernetes.dynamic", "kubernetes.stream", "kubernetes.config.kube_config", "kubernetes.leaderelection",
              "kubernetes.informer", "kubernetes.utils.create_from_yaml", "kubernetes_validate", "jsonschema", "websocket",
              "requests", "requests_oauthlib", "oauthlib")  # fmt: skip
# What the typed client (ApiClient, the tools' ResourceV1Api/CoreV1Api) loads that the daemon's transport does not.
TYPED_CLIENT = ("kubernetes.client.api_client", "multiprocessing.pool", "dateutil")


def _run(code: str) -> object:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_client_the_driver_uses_loads_without_the_rest_of_the_package() -> None:
    """The daemon's transport (JsonApi: the REST layer and the configuration) loads neither the rest of the package nor
    ApiClient's module, which brings multiprocessing.pool and dateutil for the typed models the daemon does not use."""
    loaded = _run(
        "import json, sys\n"
        "from dra_driver.kube.client import JsonApi, WatchStream, configuration_for_url\n"
        "from dra_driver.kube.k8s import ApiException\n"
        "JsonApi(configuration_for_url('http://127.0.0.1:1')).headers()\n"
        "import kubernetes.config.incluster_config\n"  # the in-cluster loader
        f"loaded = sorted(m for m in {NOT_NEEDED + TYPED_CLIENT!r} if m in sys.modules)\n"
        "print(json.dumps([loaded, sys.modules['kubernetes.client']._deferred_init]))\n"  # its table of classes not built
    )
    assert loaded == [[], "deferred"]


def test_the_deferred_packages_give_what_the_whole_package_gives() -> None:
    """Attributes that only the packages' __init__ sets (load_kube_config, parse_quantity, __version__) run it on first use."""
    names = (
        "import json, kubernetes, kubernetes.config, kubernetes.utils, kubernetes.client\n"
        "kubernetes.client.ResourceV1Api, kubernetes.client.Configuration\n"  # lazy exports: bound once asked for
        "print(json.dumps({m.__name__: sorted(n for n in vars(m) if not n.startswith('_')) + [m.__version__ if m is kubernetes else '']"
        " for m in (kubernetes, kubernetes.config, kubernetes.utils, kubernetes.client)}))\n"
    )
    eager = _run(names)
    deferred = _run(
        "import json\n"
        "import dra_driver.kube.k8s\n"
        "import kubernetes, kubernetes.config, kubernetes.utils, kubernetes.client\n"
        "from kubernetes.utils import create_from_yaml\n"  # a function the init binds over the submodule of that name
        "assert callable(create_from_yaml) and create_from_yaml.__name__ == 'create_from_yaml'\n"
        "assert kubernetes.config.load_kube_config.__module__ == 'kubernetes.config.kube_config'\n"
        "assert kubernetes.utils.parse_quantity('1Ki') == 1024\n"
        "kubernetes.__version__\n"
        + names.split("\n", 1)[1]
    )
    assert deferred == eager
    assert "load_kube_config" in eager["kubernetes.config"] and "dynamic" in eager["kubernetes"]  # the comparison sees the init's names


def test_a_package_imported_before_is_used_as_it_is() -> None:
    """Something loaded the whole package first (a tool, a test): the deferral is skipped, the client works."""
    state = _run(
        "import json, kubernetes\n"
        "from dra_driver.kube.k8s import DeferredPackage, client\n"
        "print(json.dumps([isinstance(kubernetes, DeferredPackage), client.ApiClient.__name__, 'kubernetes.dynamic' in __import__('sys').modules]))\n"
    )
    assert state == [False, "ApiClient", True]


def test_a_package_that_is_not_a_regular_package_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dra_driver.common.deferred_packages import deferred_module
    from dra_driver.kube.k8s import FIX

    (tmp_path / "namespace_only").mkdir()  # no __init__.py: a layout the deferral does not know
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"namespace_only: not a regular package with an __init__.py .* pyproject.toml"):
        deferred_module("namespace_only", FIX)
    assert "namespace_only" not in sys.modules


def _kubernetes_imports(tree: ast.AST) -> tuple[list[int], list[int], bool]:
    """Lines of module-level and of nested `kubernetes` imports, and whether the module imports dra_driver.kube.k8s at module level."""
    top, nested, via_k8s = [], [], False
    top_level = set(map(id, getattr(tree, "body", [])))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []  # annotations only: nothing runs
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n == "kubernetes" or n.startswith("kubernetes.") for n in names):
            (top if id(node) in top_level else nested).append(node.lineno)
        if id(node) in top_level and any(n == "dra_driver.kube.k8s" for n in names):
            via_k8s = True
    return top, nested, via_k8s


def test_every_module_imports_the_kubernetes_package_through_k8s() -> None:
    """Module-level imports go through dra_driver.kube.k8s (which defers the package inits before importing it); a
    function may import a kubernetes submodule only where its module imported k8s first."""
    wrong = []
    for path in sorted([*(ROOT / "dra_driver").rglob("*.py"), *(ROOT / "vendors").rglob("*.py")]):
        if path == ROOT / "dra_driver" / "kube" / "k8s.py":
            continue
        top, nested, via_k8s = _kubernetes_imports(ast.parse(path.read_text()))
        wrong += [f"{path.relative_to(ROOT)}:{line}" for line in top + (nested if not via_k8s else [])]
    assert wrong == []
