"""A rewrite's validation beside a live writer (`formats.hudi.validation`): record by
record, the records no other writer's commit wrote meanwhile must be there, unchanged and
once; those a writer rewrote are the writer's."""

from __future__ import annotations

from lakewarden.formats.hudi.validation import Digest, KeyedRows, compare_beside_writer


def _rows(rows: dict[str, tuple[str, int]], duplicates: int = 0) -> KeyedRows:
    return KeyedRows({("r0", k): v for k, v in rows.items()}, duplicates, Digest(len(rows), 0))


BEFORE = _rows({"1": ("c1", 10), "2": ("c1", 20), "3": ("c2", 30)})


def _bad(found: dict[str, object]) -> dict[str, object]:
    return {k: found[k] for k in ("lost", "changed", "appeared", "duplicates") if found[k]}


def test_records_the_writer_rewrote_or_added_are_its_own() -> None:
    after = _rows({"1": ("c1", 10), "2": ("w9", 21), "3": ("c2", 30), "4": ("w9", 40)})
    found = compare_beside_writer(BEFORE, after, ["w9"], deletes=False)
    assert _bad(found) == {}
    assert found["records_compared"] == 2 and found["records_rewritten_by_writers"] == 1


def test_a_record_lost_changed_made_up_or_read_twice_fails() -> None:
    after = _rows({"1": ("c1", 11), "4": ("c3", 40)}, duplicates=1)
    found = compare_beside_writer(BEFORE, after, ["w9"], deletes=False)
    assert _bad(found) == {"lost": 2, "changed": 1, "appeared": 1, "duplicates": 1}


def test_a_key_gone_is_the_writers_when_it_deleted() -> None:
    after = _rows({"1": ("c1", 10)})
    assert _bad(compare_beside_writer(BEFORE, after, ["w9"], deletes=True)) == {}
