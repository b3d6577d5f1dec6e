"""The collector pause: restored after a block, and survivors frozen only inside a one-shot command."""

from __future__ import annotations

import gc

import pytest

from dra_driver.allocator.gcpause import collector_paused, one_shot_command


def _build() -> list[dict[str, int]]:
    with collector_paused():
        return [{"n": n} for n in range(1000)]


def test_outside_a_one_shot_command_nothing_is_frozen() -> None:
    assert gc.get_freeze_count() == 0
    kept = _build()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert len(kept) == 1000


def test_a_one_shot_command_freezes_what_was_built_and_unfreezes_at_its_end() -> None:
    with one_shot_command():
        kept = _build()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)  # the dicts left the generations the collector scans
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert kept[999] == {"n": 999}


def test_a_failing_block_inside_a_one_shot_command_restores_everything() -> None:
    with pytest.raises(RuntimeError), one_shot_command(), collector_paused():
        raise RuntimeError("bad input")
    assert gc.isenabled() and gc.get_freeze_count() == 0
