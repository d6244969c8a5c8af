"""Which index each GPU keeps across NVML enumerations (issue 39 #3: NVML's count dropping from 8 to 7
renumbered device 5 to carry GPU 6)."""

from __future__ import annotations

from warptd.backends.nvidia.slots import Identity, place


def _ids(*names: str | None) -> list[Identity | None]:
    return [Identity(f"GPU-{n}", f"0000:{n}:00.0") if n is not None else None for n in names]


def test_the_first_enumeration_keeps_nvml_order():
    assert place([], _ids("a", "b", "c")) == [0, 1, 2]


def test_a_gpu_gone_leaves_its_index_empty_and_the_others_keep_theirs():
    known = _ids(*"abcdefgh")
    now = _ids(*"abcdegh")  # f (index 5) left the bus: NVML lists g at 5
    assert place(known, now) == [0, 1, 2, 3, 4, None, 5, 6]


def test_a_gpu_back_or_reordered_is_found_by_uuid():
    known = _ids("a", "b", "c")
    assert place(known, _ids("c", "a", "b")) == [1, 2, 0]
    assert place(known, _ids("a", "c")) == [0, None, 1]


def test_a_replacement_board_at_a_gone_gpus_address_takes_its_index_another_new_gpu_a_new_one():
    known = _ids("a", "b")
    replacement = Identity("GPU-new", "0000:b:00.0")
    assert place(known, [*_ids("a"), replacement]) == [0, 1]
    stranger = Identity("GPU-other", "0000:z:00.0")
    assert place(known, [*_ids("a"), stranger]) == [0, None, 1]


def test_a_gpu_without_identity_takes_its_own_position_where_free():
    known = _ids("a", None, "c")  # NVML refused index 1's handle at the first enumeration
    assert place(known, [*_ids("a"), None, *_ids("c")]) == [0, 1, 2]
    assert place(known, _ids("a", "x", "c")) == [0, 1, 2]  # it answers now: the unidentified slot
