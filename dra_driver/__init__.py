"""dra-driver: a Kubernetes DRA driver and multi-vendor accelerator library."""

from __future__ import annotations

__version__ = "0.1.0"
