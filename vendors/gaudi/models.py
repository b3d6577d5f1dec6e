"""PCI device ID -> Gaudi model facts (habanalabs_drv.c, pci.ids; docs/attributes.md).

The IDs follow Intel's DRA driver map so `model` values match, with one
deliberate difference: 0x1030 is GAUDI2_SEC in the habanalabs kernel history
(the PCI ID the kernel binds), so it is a Gaudi2 here, not a Gaudi3 as in
Intel's map. 0x1021 (GAUDI2_HL_288, a Gaudi2 board in HabanaAI trees) is also
mapped; Intel reports it as "Unknown".
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
UNKNOWN_MODEL = "Unknown"


@dataclass(frozen=True)
class ModelInfo:
    name: str  # the `model` attribute, spelled as Intel's driver spells it
    family: str  # dra-driver.io/family
    # HBM in bytes. HBM stacks come in power-of-two sizes, so the vendor's "GB"
    # is binary: Gaudi 4 x 8 GiB HBM2, Gaudi2 6 x 16 GiB HBM2E, Gaudi3 8 x 16 GiB HBM2E.
    memory_bytes: int | None
    # Integrated RoCE ports on an 8-card HLS/OAM baseboard: all-to-all between
    # 8 cards uses 7 peers x (1 link on Gaudi, 3 links on Gaudi2/3); the rest go out
    # of the box. None where the board has no such fixed topology (PCIe cards).
    scale_up_ports: int | None
    scale_out_ports: int | None


GAUDI = ModelInfo("Gaudi", "gaudi", 32 * GIB, scale_up_ports=7, scale_out_ports=3)
GAUDI2 = ModelInfo("Gaudi2", "gaudi2", 96 * GIB, scale_up_ports=21, scale_out_ports=3)
GAUDI3 = ModelInfo("Gaudi3", "gaudi3", 128 * GIB, scale_up_ports=21, scale_out_ports=3)
# HL-338 PCIe add-in card: same chip, but the card-to-card topology depends on
# the chassis and is not visible in sysfs, so no scale-up links are claimed.
GAUDI3_PCIE = ModelInfo("Gaudi3", "gaudi3", 128 * GIB, scale_up_ports=None, scale_out_ports=None)
UNKNOWN = ModelInfo(UNKNOWN_MODEL, "unknown", None, scale_up_ports=None, scale_out_ports=None)

PCI_DEVICE_IDS: dict[str, ModelInfo] = {
    "0x1000": GAUDI,
    "0x1001": GAUDI,  # HL2000M
    "0x1010": GAUDI,  # secured
    "0x1011": GAUDI,  # HL2000M secured
    "0x1020": GAUDI2,  # rev A..D share the ID
    "0x1021": GAUDI2,  # HL-288
    "0x1030": GAUDI2,  # GAUDI2_SEC in kernel history; Intel's map says Gaudi3
    "0x1060": GAUDI3,
    "0x1061": GAUDI3,
    "0x1062": GAUDI3,  # single die
    "0x1063": GAUDI3_PCIE,  # HL-338
}


def normalize_device_id(raw: str) -> str:
    """'0x1020', '1020', '0X1020' -> '0x1020'; raises ValueError for non-hex input."""
    text = raw.strip().lower()
    value = int(text, 16)  # int() accepts an optional 0x prefix with base 16
    if not 0 <= value <= 0xFFFF:
        raise ValueError(f"PCI device id {raw!r} is not a 16-bit value")
    return f"0x{value:04x}"


def model_for(device_id: str) -> ModelInfo:
    """The model of a normalized device ID; UNKNOWN (published as model "Unknown") otherwise."""
    return PCI_DEVICE_IDS.get(device_id, UNKNOWN)
