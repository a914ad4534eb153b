"""Incremental listing (lakewarden.manifest_cache) on metadata-only tables: pyiceberg's fast
append commits DataFile entries to a SQLite catalog in a temporary directory (no Parquet,
no server), so each test sees real manifests written and read by pyiceberg."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import current
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from benchmarks.incremental import SMALL, IncrementalSizes, append_entries, build
from lakewarden import manifest_cache
from lakewarden.kinds.compaction import plan_from_files
from lakewarden.manifest_cache import CHECKED, FULL, INCREMENTAL, ManifestCache
from lakewarden.metadata import TableFiles, read_files
from lakewarden.policy.model import CompactionPolicy

SIZES = IncrementalSizes(files=60, commits=3, partitions=4, changed_files=6)


@pytest.fixture
def wide(tmp_path: Path) -> tuple[SqlCatalog, str]:
    return build(tmp_path / "t", SIZES)


def _change(catalog: SqlCatalog, name: str, day: int = 1, files: int = 6) -> Table:
    """One commit of `files` small files to partition `day`: one new manifest."""
    table = catalog.load_table(name)
    start = len(read_files(table).data)
    paths = [f"{table.location()}/data/day={day}/n{start + i}.parquet" for i in range(files)]
    append_entries(table, [(p, day, SMALL) for p in paths])
    return catalog.load_table(name)


def _plan(files: TableFiles) -> dict | None:
    return plan_from_files(CompactionPolicy(), files.snapshot_id, files.data, 0).plan


def _paths(files: TableFiles) -> list[str]:
    return sorted(f.path for f in files.data)


def test_after_an_append_only_the_new_manifest_is_read_and_the_plan_is_the_full_ones(
    wide: tuple[SqlCatalog, str],
) -> None:
    catalog, name = wide
    cache = ManifestCache(max_files=10_000, full_every=1_000)
    first = cache.listing(catalog.load_table(name))
    assert (first.how, first.read, first.manifests) == (INCREMENTAL, 3, 3)  # cold: all read
    table = _change(catalog, name)
    listing = cache.listing(table)
    assert (listing.how, listing.read, listing.manifests) == (INCREMENTAL, 1, 4)
    full = read_files(table)
    assert listing.files.snapshot_id == full.snapshot_id
    assert _paths(listing.files) == _paths(full)
    plan = _plan(listing.files)
    assert plan is not None and plan["files_to_rewrite"] == 6  # the changed partition only
    assert plan == _plan(full)
    assert "listed 1 of 4 manifests, 3 from the plan cache" in listing.explain()


def test_every_nth_listing_is_checked_and_a_wrong_cache_is_caught_and_dropped(
    wide: tuple[SqlCatalog, str], caplog: pytest.LogCaptureFixture
) -> None:
    catalog, name = wide
    table = catalog.load_table(name)
    cache = ManifestCache(max_files=10_000, full_every=2)
    assert cache.listing(table).how == INCREMENTAL
    checked = cache.listing(table)  # the 2nd: checked, and the same
    assert (checked.how, checked.mismatch, checked.read) == (CHECKED, False, 0)
    # A cache gone wrong (a manifest's file left out): the check returns the full listing,
    # says so, and forgets the table's manifests
    path = next(iter(cache._manifests))
    cache._manifests[path] = cache._manifests[path][1:]
    assert cache.listing(table).how == INCREMENTAL  # the 3rd is trusted
    with caplog.at_level(logging.ERROR, logger="lakewarden.manifest_cache"):
        caught = cache.listing(table)
    assert (caught.how, caught.mismatch) == (CHECKED, True)
    assert _paths(caught.files) == _paths(read_files(table))
    assert "differed from a full one" in caplog.text
    assert "DIFFERED" in caught.explain()
    assert not cache._manifests
    assert cache.listing(table).read == 3  # read again from storage


def test_the_cache_holds_at_most_max_files_and_forgets_the_least_recently_used(
    wide: tuple[SqlCatalog, str],
) -> None:
    catalog, name = wide
    cache = ManifestCache(max_files=45, full_every=1_000)  # 3 manifests of 20: room for 2
    listing = cache.listing(catalog.load_table(name))
    assert len(listing.files.data) == 60  # all listed, whatever is kept
    assert cache.files == 40
    table = catalog.load_table(name)
    first, *rest = current(table).manifests(table.io)
    assert first.manifest_path not in cache._manifests  # kept first, forgotten first
    assert all(m.manifest_path in cache._manifests for m in rest)
    table = _change(catalog, name)
    assert cache.listing(table).read == 2  # the new one, and the one forgotten
    assert cache.files <= 45


def test_off_or_with_delete_manifests_the_table_is_listed_in_full(
    monkeypatch: pytest.MonkeyPatch, wide: tuple[SqlCatalog, str]
) -> None:
    catalog, name = wide
    off = ManifestCache(max_files=0, full_every=1_000).listing(catalog.load_table(name))
    assert (off.how, off.read, off.explain()) == (FULL, 3, "")
    # pyiceberg writes no delete manifests: a snapshot listing one stands in for a
    # merge-on-read table's (whose matching of deletes to data files is not per manifest)
    listed = TableFiles(1, [], [])
    monkeypatch.setattr(manifest_cache, "read_files", lambda table, ref=None: listed)
    manifest = SimpleNamespace(content=ManifestContent.DELETES, manifest_path="d.avro")
    snapshot = SimpleNamespace(manifests=lambda io: [manifest])
    table = SimpleNamespace(current_snapshot=lambda: snapshot, io=None)
    merge_on_read = ManifestCache(max_files=10_000, full_every=1_000).listing(table)  # type: ignore[arg-type]
    assert (merge_on_read.how, merge_on_read.files) == (FULL, listed)


def test_a_branch_is_listed_at_its_head_from_the_same_cache(wide: tuple[SqlCatalog, str]) -> None:
    catalog, name = wide
    table = catalog.load_table(name)
    table.manage_snapshots().create_branch(current(table).snapshot_id, "audit").commit()
    cache = ManifestCache(max_files=10_000, full_every=1_000)
    cache.listing(catalog.load_table(name))
    table = _change(catalog, name)  # main moves on; the branch stays
    on_branch = cache.listing(table, ref="audit")
    assert (on_branch.how, on_branch.read, on_branch.manifests) == (INCREMENTAL, 0, 3)
    assert _paths(on_branch.files) == _paths(read_files(table, ref="audit"))
    assert len(on_branch.files.data) == SIZES.files
