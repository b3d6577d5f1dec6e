"""The kubernetes package as the driver imports it: its modules, without the package `__init__`s that import all of it.

`import kubernetes.client` first runs kubernetes/__init__.py, which imports kubernetes.dynamic
(kubernetes_validate, jsonschema), kubernetes.stream (websocket), leaderelection, informer, kubernetes.utils
(create_from_yaml, metrics) and kubernetes.config, whose `__init__` imports the kubeconfig loader (requests,
requests_oauthlib, oauthlib): about 9 MiB of the daemon's RSS (docs/performance.md, "Memory over cycles"); and
kubernetes.client's `__init__` is a table of its thousand API and model classes (0.3 MiB; older clients import them
all). The daemon uses Configuration, rest, the exceptions, the in-cluster loader and the watch line reader; the
tools also ApiClient and the typed APIs; the kubeconfig loader only where a kubeconfig is given.

`defer_package_inits` registers those four packages in sys.modules with their real spec and path and their
`__init__` not run yet. Importing a submodule by its full name (`import kubernetes.client`,
`from kubernetes.config.incluster_config import ...`) then runs that submodule only; the first attribute the
package lacks (`kubernetes.config.load_kube_config`, `kubernetes.__version__`, `from kubernetes import dynamic`,
`kubernetes.client.ApiClient`) runs the real `__init__` in place (and then its own lazy `__getattr__`, if it has
one), so other code in the process sees the package it would see without the deferral, loaded later
(`kubernetes.utils.create_from_yaml` is the function, as the `__init__` binds it, not the submodule of that
name). Every module of the driver that uses the kubernetes package imports it through this module (tests/kube/test_k8s_import.py), so
the deferral is in place before the first import; where something imported the package first, the deferral is
skipped and everything works, at the package's full cost.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

DEFERRED_PACKAGES = ("kubernetes", "kubernetes.utils", "kubernetes.config", "kubernetes.client")  # parents first
_install_lock = threading.Lock()


class DeferredPackage(types.ModuleType):
    """A package whose `__init__` runs on the first attribute it lacks."""

    _deferred_init: str  # "deferred", "running" or "done"
    _deferred_lock: threading.RLock

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("_deferred_init") is not None:
            self._run_deferred_init()
        try:
            return self.__dict__[name]
        except KeyError:
            pass
        lazy = self.__dict__.get("__getattr__")  # the init's own lazy exports (PEP 562), e.g. kubernetes.client's classes
        if lazy is not None:
            return lazy(name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def _run_deferred_init(self) -> None:
        with self._deferred_lock:  # re-entrant: the init's own `from . import x` looks attributes up while it runs
            if self._deferred_init != "deferred":
                return
            self._deferred_init = "running"
            try:
                self.__spec__.loader.exec_module(self)  # type: ignore[union-attr]  # a loader: checked in _deferred_module
            finally:
                self._deferred_init = "done"


def _deferred_module(name: str) -> types.ModuleType:
    parent_name, _, child = name.rpartition(".")
    path = list(sys.modules[parent_name].__path__) if parent_name else None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or not spec.submodule_search_locations or not (spec.origin or "").endswith("__init__.py"):
        raise ImportError(
            f"{name}: not a regular package with an __init__.py (found {spec.origin if spec else 'nothing'}); "
            "dra-driver supports the kubernetes client versions pinned in its pyproject.toml: reinstall one of those"
        )
    module = importlib.util.module_from_spec(spec)
    module.__class__ = DeferredPackage
    module._deferred_init = "deferred"  # type: ignore[attr-defined]
    module._deferred_lock = threading.RLock()  # type: ignore[attr-defined]
    sys.modules[name] = module
    if parent_name:
        setattr(sys.modules[parent_name], child, module)
    return module


def defer_package_inits() -> None:
    """Register the kubernetes packages whose `__init__` imports what the driver does not use, not yet run (idempotent)."""
    with _install_lock:
        for name in DEFERRED_PACKAGES:
            if name not in sys.modules:
                _deferred_module(name)


defer_package_inits()

# After the deferral, and by full name: `from kubernetes import client` would ask the package for the attribute first.
import kubernetes.client as client  # noqa: E402
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

# Bound as the init's lazy export binds it, so `from kubernetes.client import Configuration` (the in-cluster loader)
# finds it without running the init; the init, when something else runs it, leaves it as it is.
if isinstance(client, DeferredPackage) and "Configuration" not in client.__dict__:
    setattr(client, "Configuration", Configuration)  # noqa: B010  # the stubs declare it a class, not a settable name

__all__ = ["ApiException", "Configuration", "DEFERRED_PACKAGES", "DeferredPackage", "client", "defer_package_inits"]
