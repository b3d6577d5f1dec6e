"""Which documents of a stream migrate must read: the rest are passed through as text, never parsed.

Rendered charts and platform manifests are mostly ConfigMaps, CRDs, RBAC and Services; only documents that
name a device-plugin resource, label or annotation, a sharing setting, or a kind migrate reads for context
can be changed or reported on. Every such name contains one of the markers below, so a document without any
of them gives migrate nothing to do, and ruamel's round trip (~50x slower per value than libyaml) is spent
only on the documents that can matter. A backslash counts too: a double-quoted YAML string can spell any
marker with escapes.
"""

from __future__ import annotations

import re

from dra_driver.backend.vocabulary import VENDOR_DOMAINS

# ConfigMap values holding device-plugin sharing settings (time-slicing, MPS)
SHARING_MARKERS = ("timeSlicing", "mps:", "sharing:")
CONTEXT_KINDS = ("ResourceClaimTemplate", "DeviceClass")  # names taken, extended resources served

# Device-plugin resources of accelerators outside the vendor domains (reported, never converted)
OTHER_RESOURCE_MARKERS = ("aws.amazon.com/neuron", "google.com/tpu")

_MARKERS = re.compile("|".join(re.escape(marker) for marker in (
    *VENDOR_DOMAINS, *OTHER_RESOURCE_MARKERS, *SHARING_MARKERS, *CONTEXT_KINDS, "\\")))


def may_matter(text: str) -> bool:
    """True unless the document's text holds nothing migrate could change or report."""
    return _MARKERS.search(text) is not None
