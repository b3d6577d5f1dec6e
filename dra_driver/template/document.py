"""Resolved choices -> a resource.k8s.io/v1 ResourceClaimTemplate (or ResourceClaim) with a comment per part.

The same intent always gives the same text: keys in a fixed order, no
timestamps, comments from the resolved meanings only.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from dra_driver.backend.vocabulary import NVIDIA_DRIVER
from dra_driver.model.api_group import API_VERSION
from dra_driver.template.intent import Intent
from dra_driver.template.resolve import Choice, Resolved

ADMIN_NOTE = "admin access: the device is shared, not reserved; the namespace needs label resource.kubernetes.io/admin-access=true"


def _selectors(choice: Choice, indent: int) -> CommentedSeq:
    seq = CommentedSeq()
    for index, selector in enumerate(choice.selectors):
        seq.append(CommentedMap(cel=CommentedMap(expression=selector.expression)))
        seq.yaml_set_comment_before_after_key(index, before=selector.meaning, indent=indent)
    return seq


SHARE_NOTE = ("a share of one GPU's memory: the GPU may hold other claims, and the driver holds this one to the amount "
              "(its own MPS control daemon's pinned memory limit)")


def _device_fields(choice: Choice, indent: int, name: str | None = None, share_memory: str | None = None) -> CommentedMap:
    """[name,] deviceClassName, allocationMode, count and selectors: an `exactly` or a firstAvailable entry."""
    body = CommentedMap() if name is None else CommentedMap(name=name)
    body["deviceClassName"] = choice.device_class
    body.yaml_add_eol_comment(choice.class_meaning, "deviceClassName")
    body["allocationMode"] = "ExactCount"
    body["count"] = choice.count
    if choice.selectors:
        body["selectors"] = _selectors(choice, indent)
    if share_memory:
        body["capacity"] = CommentedMap(requests=CommentedMap(memory=share_memory))
        body.yaml_add_eol_comment(SHARE_NOTE, "capacity")
    return body


def _request(intent: Intent, resolved: Resolved, depth: int) -> CommentedMap:
    """The one request; `depth` is the indentation of its keys."""
    request = CommentedMap(name=intent.request)
    if len(resolved.choices) == 1:
        exactly = _device_fields(resolved.choices[0], depth + 2, share_memory=intent.share_memory)
        if intent.admin_access:
            exactly["adminAccess"] = True
            exactly.yaml_add_eol_comment(ADMIN_NOTE, "adminAccess")
        request["exactly"] = exactly
        return request
    entries = CommentedSeq()
    for index, choice in enumerate(resolved.choices):
        entries.append(_device_fields(choice, depth + 2, name=choice.name, share_memory=intent.share_memory))
        entries.yaml_set_comment_before_after_key(
            index,
            before=f"choice {index + 1}: {choice.want.describe()}" + ("" if index == 0 else " (when the earlier ones cannot be allocated)"),
            indent=depth,
        )
    request["firstAvailable"] = entries
    return request


def _devices(intent: Intent, resolved: Resolved, depth: int) -> CommentedMap:
    devices = CommentedMap()
    requests = CommentedSeq([_request(intent, resolved, depth + 2)])
    devices["requests"] = requests
    if resolved.constraint:
        attribute, names, meaning = resolved.constraint
        constraints = CommentedSeq([CommentedMap(requests=list(names), matchAttribute=attribute)])
        constraints.yaml_set_comment_before_after_key(0, before=meaning, indent=depth)
        devices["constraints"] = constraints
    if resolved.configs:
        configs = CommentedSeq()
        for index, (names, parameters) in enumerate(resolved.configs):
            configs.append(CommentedMap(requests=list(names), opaque=CommentedMap(driver=NVIDIA_DRIVER, parameters=parameters)))
            strategy = parameters["sharing"]["strategy"]
            configs.yaml_set_comment_before_after_key(
                index,
                before=f"{'time-slicing' if strategy == 'TimeSlicing' else 'MPS'} sharing for {', '.join(names)} (NVIDIA {parameters['kind']})",
                indent=depth,
            )
        devices["config"] = configs
    return devices


def build_document(intent: Intent, resolved: Resolved) -> CommentedMap:
    metadata = CommentedMap(name=intent.name)
    if intent.namespace:
        metadata["namespace"] = intent.namespace
    doc = CommentedMap(apiVersion=API_VERSION, kind="ResourceClaim" if intent.as_claim else "ResourceClaimTemplate", metadata=metadata)
    if intent.as_claim:
        doc["spec"] = CommentedMap(devices=_devices(intent, resolved, 4))
    else:
        doc["spec"] = CommentedMap(spec=CommentedMap(devices=_devices(intent, resolved, 6)))
    if intent.command:
        doc.yaml_set_start_comment(f"Written by: {intent.command}")
    return doc


def to_yaml(doc: Any) -> str:
    yaml = YAML()
    yaml.indent(mapping=2, sequence=2, offset=0)
    yaml.width = 4096  # CEL on one line: a folded expression is harder to read and to grep
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
