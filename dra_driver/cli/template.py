"""`dra-driver template`: write a ResourceClaimTemplate from what you want, checked with explain.

    dra-driver template --count 4 --model H100 --fallback 4xA100 --same interconnect
    dra-driver template --mig 1g.5gb --sharing mps:threads=50 --claim --profile dgx-a100-mig --nodes 4
    dra-driver template --vendor any --memory 128Gi --family hopper/blackwell/cdna3/gaudi3 --claim

The first choice comes from --count/--vendor/--model/--family/--memory/--mig/--partition.
Each --fallback is tried in order when the earlier choices cannot be allocated
(firstAvailable): `4xA100`, `4`, `A100`, or keys as in the flags,
`count=4,model=A100,memory=80Gi,family=ampere,vendor=nvidia,mig=3g.40gb,partition=cpx_nps4`.

The YAML goes to stdout, the checks to stderr: the claim is explained against every
shipped hardware profile (an impossible request is an error naming the nearest known
devices) and, with --profile/--fleet/--kubeconfig, against that fleet.

Exit codes: 0 written (and some node of the given fleet can hold it now), 1 written but
no node of the given fleet can hold it now, 2 invalid input or no known hardware fits.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from typing import Any

from dra_driver.common.wording import plural
from dra_driver.explain.kube_gates import KUBERNETES_VERSIONS
from dra_driver.template import (
    Intent,
    Problems,
    TemplateRequest,
    TemplateResult,
    parse_fallback,
    parse_share_memory,
    parse_sharing,
    parse_want,
    template,
)
from dra_driver.template.intent import GROUPINGS, VENDORS
from dra_driver.cli import failures
from dra_driver.cli.fleet_options import add_fleet_source, default_cluster, fleet_given, fleet_source
from dra_driver.ingest.errors import InputError
from dra_driver.kube.server_check import ClusterError

EXIT_OK, EXIT_NO_NODE = 0, 1


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "template",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    want = parser.add_argument_group("the devices (first choice)")
    want.add_argument("--count", default="1", help="how many devices (default 1)")
    want.add_argument("--vendor", default="any", help=f"one of {', '.join(VENDORS)} (default any; implied by --model, --mig, --partition)")
    want.add_argument("--model", help="product name part: H100, A100, MI300X, Gaudi3 (case-insensitive for known products)")
    want.add_argument(
        "--family",
        help="architecture family; those of the shipped profiles: blackwell, hopper, ada-lovelace, ampere, turing, cdna3, cdna2, gaudi3, "
            "gaudi2; several: blackwell/hopper",
    )
    want.add_argument("--memory", help="minimum memory per device: 40Gi, 80G")
    want.add_argument("--mig", metavar="PROFILE", help="an NVIDIA MIG device of this profile: 1g.10gb, 3g.40gb")
    want.add_argument("--partition", metavar="MODE", help="an AMD GPU partition: cpx, dpx, qpx, or with memory mode cpx_nps4")
    parser.add_argument(
        "--fallback",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fallback choice, tried in order: 4xA100 or count=4,model=A100 (repeatable, at most 7)",
    )
    parser.add_argument(
        "--same",
        choices=sorted(GROUPINGS),
        help="all devices on one interconnect domain (NVLink clique, XGMI hive, Gaudi box), PCIe root or NUMA node (AMD)",
    )
    parser.add_argument(
        "--sharing", metavar="STRATEGY", help="NVIDIA sharing: time-slicing[:Short|Medium|Long] or mps[:threads=50,pinned-memory=10Gi]"
    )
    parser.add_argument(
        "--share-memory",
        metavar="QUANTITY",
        help="a share of one NVIDIA GPU's memory (20Gi): the GPU may hold other claims too; "
        "needs nodes running with --consumable-gpu-memory and the DRAConsumableCapacity gate",
    )
    parser.add_argument(
        "--admin-access",
        action="store_true",
        help="admin access (monitoring): devices are shared, not reserved; the namespace needs the admin-access label",
    )
    out = parser.add_argument_group("the object")
    out.add_argument("--name", default="accelerators", help="object name (default accelerators)")
    out.add_argument("-n", "--namespace", help="namespace (default: none written)")
    out.add_argument("--request", default="accel", help="request name pods refer to in resources.claims[].request (default accel)")
    out.add_argument("--claim", action="store_true", help="write a ResourceClaim instead of a ResourceClaimTemplate")
    out.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="yaml: the object with comments saying what each part means; json: the same object, no comments (default: yaml)",
    )
    add_fleet_source(
        parser,
        "check against a fleet (optional, one kind)",
        "ResourceSlices (and claims holding devices): kubectl List, multi-doc YAML, or a directory",
        "read slices, classes, claims and nodes from a cluster (read only)",
    )
    parser.add_argument(
        "--kubernetes-version",
        choices=KUBERNETES_VERSIONS,
        help="the cluster's Kubernetes release the claim is checked for: its gate defaults (1.36: consumable capacity, device taints, extended "
            "resources on) and its scheduler's device order (default: the checked cluster's own, else 1.35)",
    )
    parser.add_argument(
        "--no-hardware-check",
        action="store_true",
        help="do not require that some shipped hardware profile could hold it (hardware newer than the profiles)",
    )
    parser.set_defaults(func=run)


def _flag_values(args: argparse.Namespace) -> dict[str, str]:
    names = {
        "count": args.count,
        "vendor": args.vendor,
        "model": args.model,
        "family": args.family,
        "memory": args.memory,
        "mig": args.mig,
        "partition": args.partition,
    }
    return {key: str(value) for key, value in names.items() if value is not None}


# Flags that shape the YAML, in the order the written command line lists them.
_SHAPING = (
    "name",
    "namespace",
    "request",
    "claim",
    "count",
    "vendor",
    "model",
    "family",
    "memory",
    "mig",
    "partition",
    "fallback",
    "same",
    "sharing",
    "share_memory",
    "admin_access",
)
_DEFAULTS = {"name": "accelerators", "request": "accel", "count": "1", "vendor": "any"}


def canonical_command(args: argparse.Namespace) -> str:
    """The command line that writes this YAML, in a fixed flag order (the same wishes give the same first line)."""
    words = ["dra-driver", "template"]
    for name in _SHAPING:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            for item in value:
                words += [flag, item]
        elif value not in (None, False, _DEFAULTS.get(name)):
            words += [flag, str(value)]
    return shlex.join(words)


def request_from_args(args: argparse.Namespace) -> TemplateRequest:
    problems = Problems()
    wants = [parse_want(_flag_values(args), "first choice", problems)]
    wants += [parse_fallback(spec, index, problems) for index, spec in enumerate(args.fallback)]
    sharing = parse_sharing(args.sharing, problems) if args.sharing else None
    if problems.errors:
        raise InputError(problems.errors)
    share = parse_share_memory(args.share_memory, problems) if args.share_memory else None
    if problems.errors:
        raise InputError(problems.errors)
    intent = Intent(args.name, args.namespace, args.request, tuple(wants), args.same, sharing, args.admin_access, args.claim,
                    canonical_command(args), share_memory=share)  # fmt: skip
    checked = fleet_given(args) or default_cluster()
    return TemplateRequest(
        intent, fleet_source(args) if checked else None, hardware_check=not args.no_hardware_check, kubernetes_version=args.kubernetes_version
    )


def _report(result: TemplateResult) -> int:
    check = result.fleet
    if check is None:
        return EXIT_OK
    print(f"Checked against {', '.join(check.sources)}: {len(check.fitting)} of {plural(check.nodes, 'node')} could hold it now", file=sys.stderr)
    if check.error:
        print(f"  no node can: {check.error}", file=sys.stderr)
    for line in check.lines[1:]:  # the first line repeats the count above
        print(line, file=sys.stderr)
    return EXIT_OK if check.fitting else EXIT_NO_NODE


def run(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    try:
        result = template(request)
    except ClusterError as exc:  # kubectl's default cluster, not asked for by name: write the YAML unchecked
        if fleet_given(args):
            raise
        failures.warning(f"not checked against a cluster: {exc}")
        result = template(replace(request, source=None))
    if args.output == "json":
        sys.stdout.write(json.dumps(result.document, indent=2) + "\n")
    else:
        sys.stdout.write(result.text)
    for note in result.notes:
        failures.warning(note)
    return _report(result)
