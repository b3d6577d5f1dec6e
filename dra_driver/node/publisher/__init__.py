"""ResourceSlice publishing: one SlicePublisher per (node, driver) pool."""

from __future__ import annotations

from dra_driver.common.backoff import Backoff
from dra_driver.node.publisher.plan import Plan, plan_pool
from dra_driver.node.publisher.publisher import InventorySource, PublisherOptions, SlicePublisher

__all__ = ["Backoff", "InventorySource", "Plan", "PublisherOptions", "SlicePublisher", "plan_pool"]
