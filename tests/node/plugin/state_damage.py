"""Ways a claim's checkpoint record can be damaged on disk, shared by the in-process and kill -9 tests."""

from __future__ import annotations

import random
from pathlib import Path

# Each leaves the claim's CDI spec in place; the claim must stay reserved and answerable.
DAMAGE_KINDS = ("zero-byte", "torn", "flipped-byte", "random-bytes", "symlink", "directory", "foreign-uid", "missing")


def damage_record(checkpoint_dir: Path, uid: str, kind: str, other_uid: str) -> None:
    """Damage claim `uid`'s record file; `other_uid` is another prepared claim (symlink target, foreign content)."""
    path = checkpoint_dir / f"{uid}.json"
    data = path.read_bytes()
    if kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "torn":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif kind == "flipped-byte":
        # One bit of the last line's body: still JSON, the checksum fails.
        at = data.rindex(b'"phase"') + 1
        path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])
    elif kind == "random-bytes":
        path.write_bytes(random.Random(uid).randbytes(len(data)))
    elif kind == "symlink":
        path.unlink()
        path.symlink_to(checkpoint_dir / f"{other_uid}.json")
    elif kind == "directory":
        path.unlink()
        (path / "inside").mkdir(parents=True)
    elif kind == "foreign-uid":
        path.write_bytes((checkpoint_dir / f"{other_uid}.json").read_bytes())
    elif kind == "missing":
        path.unlink()
    else:
        raise ValueError(kind)
