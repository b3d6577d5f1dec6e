"""`dra-driver migrate`: rewrite device-plugin GPU requests in manifests as DRA claims (docs/migration.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dra_driver.common.atomic_file import replace_file
from dra_driver.cli import failures
from dra_driver.ingest import InputError, active, build_documents, checked_objects, display_name, read_text
from dra_driver.migrate import STRATEGIES, FileResult, MigrationError, Options, load_catalog, migrate
from dra_driver.migrate.helm import chart_report, is_chart, is_template_source
from dra_driver.migrate.kustomize import kustomization_file, migrate_directory

EXIT_OK = 0
EXIT_WOULD_CHANGE = 1
EXIT_REFUSED = 2
EXIT_UNCONVERTED = 4  # --check: nothing to change, but device-plugin requests remain that migrate cannot convert
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        description="Read Kubernetes manifests (files or '-' for stdin) and rewrite device-plugin requests as "
        "ResourceClaimTemplates and pod resource claims, or emit extended-resource DeviceClasses. "
        "Everything it does not change is written back byte for byte.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="manifest files; '-' reads standard input; a directory with a kustomization.yaml is "
                        "migrated with its resources and patches (needs -w or --check); any other directory stands "
                        "for its *.yaml, *.yml and *.json files")
    parser.add_argument("--strategy", choices=STRATEGIES, default="claims",
                        help="claims: rewrite workloads to use ResourceClaimTemplates (default); extended-resource: "
                        "leave workloads unchanged and emit DeviceClasses with extendedResourceName (alpha gate)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-o", "--output", type=Path, help="write the migrated stream(s) to this file instead of stdout")
    output.add_argument("-w", "--write", action="store_true", help="rewrite each input file in place")
    output.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if anything would change, else 4 if device-plugin requests remain "
                        "that migrate cannot convert")
    parser.add_argument("--report", choices=("text", "json", "none"), default="text",
                        help="report of what was and was not converted, on stderr (default: text)")
    parser.add_argument("--no-tolerations", dest="tolerations", action="store_false",
                        help="do not add the toleration {key: <resource>, operator: Exists, effect: NoSchedule} that the "
                        "ExtendedResourceToleration admission plugin gave pods for each converted device-plugin resource")
    parser.add_argument("--deviceclasses", type=Path, default=None,
                        help="directory of DeviceClass YAML the cluster has (default: the shipped deviceclasses/)")
    parser.set_defaults(func=run)


def _join(results: list[FileResult]) -> str:
    text = ""
    for result in results:
        if text and result.output:
            if not text.endswith("\n"):
                text += "\n"
            if not result.output.startswith("---"):
                text += "---\n"
        text += result.output
    return text


def _write_atomic(path: Path, text: str) -> None:
    """Rewrite a manifest in place (atomic); it keeps its mode."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    replace_file(path, text.encode(), durable=False, mode=mode)


def read_checked(name: str, round_trip_whole: bool = False) -> str:
    """The text of one input, refused unless the input layer's checks pass on it as a whole.

    Before ruamel (recursive, ~40x slower per value than libyaml's events) sees it:
    size, encoding, nesting, values and aliases, syntax and duplicate keys with the
    line of the file, and the envelope rules of every object (a `kind` that is a map,
    a 50 MB name). A manifest gets the ordinary limits: ruamel parses only its
    documents that may need migrating, which must fit the round-trip limits together
    (migrate.stream.split). A kustomization's files (`round_trip_whole`) are parsed
    whole, so they get the round-trip limits here.
    """
    limits = active().for_round_trip() if round_trip_whole else active()
    text = read_text(name, limits)
    if not is_template_source(text):  # a Helm template is not YAML: migrate reports it ("render first"), never parses it
        checked_objects(build_documents(text.encode(), display_name(name), limits), display_name(name))
    return text


def _expand_inputs(names: list[str]) -> tuple[list[str], list[Path], list[Path]]:
    """(manifest inputs, kustomization directories, Helm charts): a plain directory stands for its manifest files.

    Like `kubectl apply -f DIR`, only the directory's own files are read, not its subdirectories, in name order.
    A chart's files are templates and values, not manifests: they are reported, never printed or rewritten.
    """
    files: list[str] = []
    kustomizations: list[Path] = []
    charts: list[Path] = []
    for name in names:
        path = Path(name)
        if name == "-" or not path.is_dir():
            files.append(name)
        elif kustomization_file(path) is not None:
            kustomizations.append(path)
        elif is_chart(path):
            charts.append(path)
        else:
            found = sorted(str(p) for p in path.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
            if not found:
                raise ValueError(f"{path}: a directory with no kustomization and no {', '.join(MANIFEST_SUFFIXES)} files")
            files.extend(found)
    return files, kustomizations, charts


def run(args: argparse.Namespace) -> int:
    if args.write and "-" in args.files:
        return failures.fail("--write cannot rewrite standard input", EXIT_REFUSED)
    if args.files.count("-") > 1:
        return failures.fail("'-' may be given once", EXIT_REFUSED)
    try:
        files, directories, charts = _expand_inputs(args.files)
    except ValueError as exc:
        return failures.fail(str(exc), EXIT_REFUSED)
    if directories and not (args.write or args.check):
        return failures.fail(f"{directories[0]} is a kustomization: it is migrated in place, use -w (or --check)", EXIT_REFUSED)
    try:
        inputs = [(name, read_checked(name)) for name in files]
    except InputError as exc:
        return failures.report(exc)
    if args.deviceclasses is not None and not args.deviceclasses.is_dir():
        return failures.fail(f"--deviceclasses {args.deviceclasses}: not a directory", EXIT_REFUSED)
    try:
        options = Options(strategy=args.strategy, catalog=load_catalog(args.deviceclasses), tolerations=args.tolerations)
        results, report = migrate(inputs, options)
        for directory in directories:
            more, more_report = migrate_directory(directory, options, read=lambda path: read_checked(str(path), round_trip_whole=True))
            results += more
            report.merge(more_report)
        for chart in charts:
            report.merge(chart_report(chart, read=lambda path: read_text(str(path), active())))
    except (InputError, MigrationError) as exc:
        return failures.report(exc)
    if args.report == "json":
        print(report.to_json(), file=sys.stderr)
    elif args.report == "text":
        for finding in report.findings:
            print(finding, file=sys.stderr)
        failures.info(report.summary(written=args.write))  # `dra-driver migrate: ...`, as every command's lines
    if args.check:
        if report.changed_files:
            return EXIT_WOULD_CHANGE
        return EXIT_UNCONVERTED if report.remaining else EXIT_OK
    if args.write:
        for result in results:
            if result.changed:
                _write_atomic(Path(result.source), result.output)
    elif args.output is not None:
        _write_atomic(args.output, _join(results))
    else:
        sys.stdout.write(_join(results))
    return EXIT_OK
