"""The kubernetes package as the driver imports it: its modules, without the package `__init__`s that import all of it.

`import kubernetes.client` first runs kubernetes/__init__.py, which imports kubernetes.dynamic
(kubernetes_validate, jsonschema), kubernetes.stream (websocket), leaderelection, informer, kubernetes.utils
(create_from_yaml, metrics) and kubernetes.config, whose `__init__` imports the kubeconfig loader (requests,
requests_oauthlib, oauthlib): about 9 MiB of the daemon's RSS (docs/performance.md, "Memory over cycles"); and
kubernetes.client's `__init__` is a table of its thousand API and model classes (0.3 MiB; older clients import them
all). The daemon uses Configuration, rest, the exceptions, the in-cluster loader (watch lines are read by kube/watch_lines.py); the
tools also ApiClient and the typed APIs; the kubeconfig loader only where a kubeconfig is given.

dra_driver/common/deferred_packages.py registers those four packages with their `__init__` not run yet: importing a
submodule by its full name (`import kubernetes.client`, `from kubernetes.config.incluster_config import ...`) runs that
submodule only; the first attribute a package lacks (`kubernetes.config.load_kube_config`, `kubernetes.__version__`,
`from kubernetes import dynamic`, `kubernetes.client.ApiClient`) runs the real `__init__` in place
(`kubernetes.utils.create_from_yaml` is the function, as the `__init__` binds it, not the submodule of that name).
Every module of the driver that uses the kubernetes package imports it through this module
(tests/kube/test_k8s_import.py), so the deferral is in place before the first import; where something imported the
package first, the deferral is skipped and everything works, at the package's full cost.
"""

from __future__ import annotations

from dra_driver.common.deferred_packages import DeferredPackage, defer_package_inits

DEFERRED_PACKAGES = ("kubernetes", "kubernetes.utils", "kubernetes.config", "kubernetes.client")  # parents first
FIX = "dra-driver supports the kubernetes client versions pinned in its pyproject.toml: reinstall one of those"


def defer_kubernetes_inits() -> None:
    """Register the kubernetes packages whose `__init__` imports what the driver does not use, not yet run (idempotent)."""
    defer_package_inits(DEFERRED_PACKAGES, FIX)


defer_kubernetes_inits()

# After the deferral, and by full name: `from kubernetes import client` would ask the package for the attribute first.
import kubernetes.client as client  # noqa: E402
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

# Bound as the init's lazy export binds it, so `from kubernetes.client import Configuration` (the in-cluster loader)
# finds it without running the init; the init, when something else runs it, leaves it as it is.
if isinstance(client, DeferredPackage) and "Configuration" not in client.__dict__:
    setattr(client, "Configuration", Configuration)  # noqa: B010  # the stubs declare it a class, not a settable name

__all__ = ["FIX", "ApiException", "Configuration", "DEFERRED_PACKAGES", "DeferredPackage", "client", "defer_kubernetes_inits"]
