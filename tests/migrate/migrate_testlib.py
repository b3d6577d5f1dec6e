from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dra_driver.migrate import FileResult, Options, Report, load_catalog, migrate

CORPUS = Path(__file__).parent / "corpus"
GOOD = sorted(p for p in CORPUS.glob("*.yaml"))
REFUSE = sorted((CORPUS / "refuse").glob("*.yaml"))


def base_name(name: str) -> str:
    """A generated template name without its spec digest (`x-accelerators-1a2b3c4d` -> `x-accelerators`)."""
    return re.sub(r"-[0-9a-f]{8}$", "", name)


def run(text: str, source: str = "in.yaml", strategy: str = "claims", tolerations: bool = True) -> tuple[FileResult, Report]:
    results, report = migrate([(source, text)], Options(strategy=strategy, catalog=load_catalog(), tolerations=tolerations))
    return results[0], report


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def objects(text: str) -> list[dict[str, Any]]:
    found = []
    for d in docs(text):
        found.extend(d["items"] if d.get("kind") == "List" else [d])
    return found


def by_kind(text: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects(text) if o.get("kind") == kind]




def device_plugin_requests(text: str) -> list[str]:
    """Device-plugin resource names still requested in `resources.limits` / `requests` of any object of `text`."""
    from dra_driver.migrate.resources import classify
    from dra_driver.sources.workloads import find_resource_maps

    return [str(name) for obj in objects(text) for _, values in find_resource_maps(obj) for name in values
            if classify(str(name)) is not None]


def is_toleration_note(finding: Any) -> bool:
    """The note that says a toleration for a converted resource was added (tolerations.py)."""
    return str(finding.where.path).endswith("tolerations")


def pod_manifest(name: str, resource: str, count: int = 1) -> str:
    """A one-container Pod asking for `count` of `resource` in its limits."""
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: x\n"
            f"    resources:\n      limits:\n        {resource}: {count}\n")


def cli(argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """`dra-driver migrate ARGV`: (exit code, stdout, stderr)."""
    from dra_driver.cli.main import main

    code = main(["migrate", *argv])
    out, err = capsys.readouterr()
    return code, out, err
