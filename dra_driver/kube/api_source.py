"""Where the API server is, found the way kubectl finds it; decided from flags, environment and files alone.

Order (kubectl's): `--kubeconfig FILE`; else `$KUBECONFIG` (a `:`-separated list, merged: the first
file that names a context, cluster or user, or sets current-context, wins; missing files are skipped);
else `~/.kube/config`; else, inside a pod, the in-cluster service account. `--context` picks a context
of the kubeconfig (the current-context otherwise). `run` and the tests may also give an API server URL.

No kubernetes client import: `dra-driver run` checks this before it creates or serves anything (a node
with nowhere to connect fails at once, naming the fix) and builds the client only later
(dra_driver.kube.client). Every command that reads a cluster (explain, fleet, template, run) uses this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dra_driver import __version__
from dra_driver.common.errors import UsageError

# Sent with every request (the kubernetes client's and the start-up check's), so an operator can tell this
# driver's traffic apart in the API server's audit log and metrics (the generated client's default is
# "OpenAPI-Generator/<client version>/python").
USER_AGENT = f"dra-driver/{__version__}"

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeConfigError(UsageError):
    """No usable way to reach an API server; the message says what to pass."""


@dataclass(frozen=True)
class ApiSource:
    kind: Literal["url", "kubeconfig", "in-cluster"]
    location: str = ""  # the URL, or the kubeconfig files joined by os.pathsep (the client merges them)
    context: str | None = None  # --context; None: the kubeconfig's current-context
    origin: str = ""  # where it was found: --api-server, --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(self.location.split(os.pathsep)) if self.kind == "kubeconfig" else ()

    def describe(self) -> str:
        """How a person recognises this source in a message: `kubeconfig ~/.kube/config (context prod)`."""
        if self.kind == "url":
            return self.location
        if self.kind == "in-cluster":
            return "the in-cluster service account"
        where = self.location if self.origin == "--kubeconfig" else f"{self.origin} ({self.location})"
        return f"kubeconfig {where}" + (f", context {self.context}" if self.context else "")


def kubeconfig_path() -> str:
    """`$KUBECONFIG` as kubectl reads it (an empty value counts as unset)."""
    return os.environ.get("KUBECONFIG", "")


def _default_kubeconfig(context: str | None) -> ApiSource | None:
    listed = kubeconfig_path()
    if listed:
        present = [p for p in (os.path.expanduser(x) for x in listed.split(os.pathsep) if x) if Path(p).is_file()]
        return ApiSource("kubeconfig", os.pathsep.join(present), context, "$KUBECONFIG") if present else None
    home = Path.home() / ".kube" / "config"
    return ApiSource("kubeconfig", str(home), context, "~/.kube/config") if home.is_file() else None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.exists()


def searched() -> str:
    """What was looked at and found empty, for the error that says what to pass."""
    listed = kubeconfig_path()
    where = f"no file of $KUBECONFIG ({listed}) exists" if listed else f"$KUBECONFIG is unset and {Path.home() / '.kube' / 'config'} does not exist"
    return f"{where}, and this is not a pod (no KUBERNETES_SERVICE_HOST and service-account token)"


def find_api_source(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> ApiSource | None:
    """The first source that applies, or None when none is configured. Raises KubeConfigError for a bad explicit one."""
    if base_url:
        if not base_url.startswith(("http://", "https://")):
            raise KubeConfigError(f"API server URL {base_url!r} must start with http:// or https://")
        if context:
            raise KubeConfigError("--context picks a kubeconfig context; it cannot be used with an API server URL")
        return ApiSource("url", base_url, None, "--api-server")
    if kubeconfig:
        if not Path(kubeconfig).exists():  # what else is wrong with it (a directory, /dev/zero) the input layer says
            raise KubeConfigError(f"kubeconfig {kubeconfig} does not exist; pass an existing --kubeconfig")
        return ApiSource("kubeconfig", kubeconfig, context, "--kubeconfig")
    found = _default_kubeconfig(context)
    if found is not None:
        return found
    if _in_cluster():
        if context:
            raise KubeConfigError(f"--context {context}: no kubeconfig to pick it from ({searched()}); pass --kubeconfig FILE")
        return ApiSource("in-cluster", origin="in-cluster")
    if context:
        raise KubeConfigError(f"--context {context}: no kubeconfig to pick it from ({searched()}); pass --kubeconfig FILE")
    return None


def api_source(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None, instead: str = "") -> ApiSource:
    """Like find_api_source, but no source at all is a KubeConfigError naming what to pass (`instead`: other choices)."""
    found = find_api_source(base_url, kubeconfig, context)
    if found is None:
        alternatives = f", or {instead}" if instead else ""
        raise KubeConfigError(f"no cluster configured: {searched()}; pass --kubeconfig FILE (and --context NAME), or set $KUBECONFIG{alternatives}")
    return found
