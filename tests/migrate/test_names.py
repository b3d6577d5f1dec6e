from __future__ import annotations

import re

from dra_driver.migrate.names import dns_label, dns_subdomain

LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def test_short_names_are_kept_readable() -> None:
    assert dns_label("trainer", "mig-1g-10gb") == "trainer-mig-1g-10gb"
    assert dns_subdomain("my.app", "accelerators") == "my.app-accelerators"


def test_long_names_are_truncated_with_a_hash_and_stay_distinct() -> None:
    a = dns_subdomain("x" * 80 + "a", "accelerators")
    b = dns_subdomain("x" * 80 + "b", "accelerators")
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert a == dns_subdomain("x" * 80 + "a", "accelerators")
    assert SUBDOMAIN.match(a) and SUBDOMAIN.match(b)


def test_invalid_characters_are_replaced() -> None:
    name = dns_label("Sidecar_Profiler.v2", "gpu")
    assert LABEL.match(name) and name == "sidecar-profiler-v2-gpu"
    assert LABEL.match(dns_label("-" * 70 + "z"))
