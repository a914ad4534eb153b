"""Which files Delta's checked Spark rewrite takes (`staged_rewrite.choose`): a bin-pack's
small files, a purge's files with deletion vectors (each kept even alone), and the commit's
predicate over what both rewrite."""

from __future__ import annotations

from typing import Any

from lakewarden.formats.delta.staged_rewrite import _rewritten_partitions, choose

MB = 1 << 20
DV = {"storageType": "u", "pathOrInlineDv": "x", "offset": 1, "sizeInBytes": 40, "cardinality": 9}


def _add(path: str, day: str, size: int, dv: bool = False) -> dict[str, Any]:
    add: dict[str, Any] = {"path": path, "partitionValues": {"day": day}, "size": size}
    return {**add, "deletionVector": DV} if dv else add


ADDS = [
    _add("d1/big-dv", "d1", 100 * MB, dv=True),  # hollowed out: the purge's
    _add("d1/small-a", "d1", MB),
    _add("d1/small-b", "d1", MB),
    _add("d2/small-dv", "d2", MB, dv=True),
    _add("d2/small-c", "d2", MB),
    _add("d3/big", "d3", 100 * MB),
]
PLAN = {"target_file_size_bytes": 64 * MB, "min_file_size_bytes": 48 * MB}


def _paths(plan: dict[str, Any]) -> list[list[str]]:
    return [[a["path"] for a in b.adds] for b in choose(ADDS, ["day"], plan)]


def test_a_purge_takes_each_file_with_a_deletion_vector_even_alone() -> None:
    plan = {
        **PLAN,
        "optimize": True,
        "partitions": [{"day": "d2"}],
        "purge_partitions": [{"day": "d1"}],
    }
    assert _paths(plan) == [["d1/big-dv"], ["d2/small-c", "d2/small-dv"]]
    assert _rewritten_partitions(plan) == [{"day": "d2"}, {"day": "d1"}]


def test_a_purge_alone_packs_nothing_else() -> None:
    plan = {**PLAN, "optimize": False, "partitions": [], "purge_partitions": [{"day": "d1"}]}
    assert _paths(plan) == [["d1/big-dv"]]
    assert _rewritten_partitions(plan) == [{"day": "d1"}]
    whole: dict[str, Any] = {**PLAN, "optimize": False, "partitions": None, "purge_partitions": []}
    assert _paths(whole) == [["d1/big-dv"], ["d2/small-dv"]]
    assert _rewritten_partitions(whole) is None


def test_without_a_purge_a_lone_file_is_not_rewritten() -> None:
    plan = {**PLAN, "optimize": True, "partitions": None, "purge_partitions": None}
    # d1's two small files; d2's two (its deletion vector applied as they are read)
    assert _paths(plan) == [["d1/small-a", "d1/small-b"], ["d2/small-c", "d2/small-dv"]]
    assert _rewritten_partitions(plan) is None
    lone = [_add("d4/small-dv", "d4", MB, dv=True)]
    assert choose(lone, ["day"], plan) == []
