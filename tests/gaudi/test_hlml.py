from __future__ import annotations

import logging
import sys

from dra_driver_gaudi import hlml
from dra_driver_gaudi.simulated.fake_hlml import FakeHlml


def test_without_pyhlml_returns_none_and_logs_once(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # makes `import pyhlml` raise ImportError
    monkeypatch.setattr(hlml, "_missing_logged", type(hlml._missing_logged)())
    with caplog.at_level(logging.INFO, logger="dra_driver_gaudi.hlml"):
        assert hlml.open_hlml(["0000:19:00.0"]) is None
        assert hlml.open_hlml(["0000:19:00.0"]) is None
    assert sum("habana-pyhlml is not installed" in r.getMessage() for r in caplog.records) == 1


class _NoLibrary(FakeHlml):
    def hlmlInit(self) -> None:
        raise RuntimeError("Failed to load libhlml")


def test_library_that_cannot_initialise_gives_none():
    assert hlml.open_hlml(["0000:19:00.0"], library=_NoLibrary({"0000:19:00.0": "S1"})) is None


def test_serial_and_memory_through_the_library():
    library = FakeHlml({"0000:19:00.0": "S1\x00", "0000:1a:00.0": "S2"}, memory={"0000:19:00.0": 100 << 30})
    session = hlml.open_hlml(["0000:19:00.0", "0000:1a:00.0", "0000:ff:00.0"], library=library)
    assert session is not None
    assert (session.serial("0000:19:00.0"), session.serial("0000:1a:00.0"), session.serial("0000:ff:00.0")) == ("S1", "S2", "")
    assert session.memory_total("0000:19:00.0") == 100 << 30
    assert session.memory_total("0000:1a:00.0") is None
    session.close()
    assert library.initialised is False


def test_wait_critical_maps_the_event_to_the_device():
    library = FakeHlml({"0000:19:00.0": "S1", "0000:1a:00.0": "S2"})
    session = hlml.open_hlml(["0000:19:00.0", "0000:1a:00.0"], library=library)
    assert session.wait_critical(1) is None  # timeout
    library.inject_critical_error("0000:1a:00.0")
    assert session.wait_critical(1000) == "0000:1a:00.0"


def test_memory_from_hlml_overrides_the_model_figure(open_profile):
    backend = open_profile("gaudi3-hls")
    backend.fake_hlml.set_memory_total("0000:1b:00.0", 130000 << 20)
    inventory = backend.discover()
    assert inventory.device("0000-1b-00-0-0x1060").capacity["memory"] == "130000Mi"
    assert inventory.device("0000-1c-00-0-0x1060").capacity["memory"] == "128Gi"  # no HLML figure: the model's
