"""Third-party packages imported module by module, without the package `__init__` that imports all of them.

Some packages' `__init__` imports far more than the driver uses: kubernetes (dynamic, stream, the kubeconfig
loader's dependencies: dra_driver/kube/k8s.py), prometheus_client (its HTTP servers, gzip, wsgiref, the
OpenMetrics writer: dra_driver/common/prometheus.py); each stays resident in the daemon (docs/performance.md,
"Memory over cycles").

`defer_package_inits` registers such packages in sys.modules with their real spec and path and their `__init__`
not run yet. Importing a submodule by its full name (`import kubernetes.client`, `import prometheus_client.registry`)
then runs that submodule only; the first attribute the package lacks (`kubernetes.__version__`,
`from prometheus_client import generate_latest`) runs the real `__init__` in place (and then its own lazy
`__getattr__`, if it has one), so other code in the process sees the package it would see without the deferral,
loaded later. A package imported before the deferral is left as it is: everything works, at the package's full cost.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

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
                self.__spec__.loader.exec_module(self)  # type: ignore[union-attr]  # a loader: checked in deferred_module
            finally:
                self._deferred_init = "done"


def deferred_module(name: str, fix: str) -> types.ModuleType:
    """Register package `name` (its parent already in sys.modules) with its `__init__` not run; ImportError with `fix`
    (what to reinstall) when it is not a regular package, so the layout the deferral relies on is not guessed."""
    parent_name, _, child = name.rpartition(".")
    path = list(sys.modules[parent_name].__path__) if parent_name else None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or not spec.submodule_search_locations or not (spec.origin or "").endswith("__init__.py"):
        raise ImportError(f"{name}: not a regular package with an __init__.py (found {spec.origin if spec else 'nothing'}); {fix}")
    module = importlib.util.module_from_spec(spec)
    module.__class__ = DeferredPackage
    module._deferred_init = "deferred"  # type: ignore[attr-defined]
    module._deferred_lock = threading.RLock()  # type: ignore[attr-defined]
    sys.modules[name] = module
    if parent_name:
        setattr(sys.modules[parent_name], child, module)
    return module


def defer_package_inits(names: Sequence[str], fix: str) -> None:
    """Register `names` (parents first) not yet run, skipping any already imported (idempotent); `fix` as in deferred_module."""
    with _install_lock:
        for name in names:
            if name not in sys.modules:
                deferred_module(name, fix)
