"""Incremental listing of an Iceberg table's data files (issue 32 §5): plan from what
changed since the last plan.

Iceberg never rewrites a manifest in place, so what one lists is cached by its path: a plan
reads only the manifests of the snapshot that this process has not seen (those written
since its last plan of the table) and takes the others' file descriptions from the cache.
The files listed, and so the plan (`kinds.compaction.plan_from_files` over them), are the
ones a full listing (`metadata.read_files`) gives.

Where it lives: the planning process's memory, bounded by the file descriptions it holds
(setting `plan_cache_files`; the least recently used manifests go first). Not Postgres:
reading a million descriptions back from a table costs about what decoding the manifests
does, and a shared cache would need invalidation across processes for no gain in
correctness. A worker that has not planned the table yet (restart, another worker) lists
it in full, which is what every plan did before.

Staying honest: every `plan_full_every`-th plan of a table in a process lists it in full
as well and compares the two; a difference is logged as an error, that table's cached
manifests are dropped, and the full listing is what is planned.

Scope: snapshots without delete manifests (append-only and copy-on-write tables). A new
delete file changes what older data files hold, and which data files it applies to is
matched across manifests (pyiceberg's delete index, equality deletes by partition and
sequence number), so a snapshot with delete manifests is listed in full.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import ManifestGroupPlanner, Table

from lakewarden.metadata import (
    DataFile,
    Partition,
    TableFiles,
    describe,
    partition_namer,
    read_files,
)
from lakewarden.settings import get_settings

log = logging.getLogger(__name__)

FULL = "full"  # listed in full: no cache, or delete manifests
INCREMENTAL = "incremental"  # the snapshot's unseen manifests read, the rest cached
CHECKED = "checked"  # listed both ways and compared; the full listing is returned


@dataclass(frozen=True)
class Listing:
    files: TableFiles
    manifests: int  # the snapshot's manifests
    read: int  # of them read from storage for the incremental listing (FULL: all)
    how: str  # FULL | INCREMENTAL | CHECKED
    mismatch: bool = False  # CHECKED: the incremental listing differed (and was dropped)

    def explain(self) -> str:
        """What the plan's reason says about how the files were listed."""
        cached = self.manifests - self.read
        if self.how == FULL or (self.how == INCREMENTAL and not cached):
            return ""  # every manifest read: as a full listing
        text = f"listed {self.read} of {self.manifests} manifests, {cached} from the plan cache"
        if self.how == CHECKED:
            verdict = "DIFFERED: cache dropped" if self.mismatch else "the same"
            text += f"; checked against a full listing ({verdict})"
        return text


class ManifestCache:
    """Data file descriptions by manifest path, for at most `max_files` files (0: off)."""

    def __init__(self, max_files: int, full_every: int) -> None:
        self.max_files = max_files
        self.full_every = max(1, full_every)
        self._manifests: OrderedDict[str, tuple[DataFile, ...]] = OrderedDict()
        self._files = 0
        self._plans: dict[str, int] = {}  # table uuid -> its listings since the process began
        self._lock = threading.Lock()

    @property
    def files(self) -> int:
        return self._files

    def listing(self, table: Table, ref: str | None = None) -> Listing:
        """The live data files of the current snapshot (or of branch `ref`'s head)."""
        snapshot = table.snapshot_by_name(ref) if ref else table.current_snapshot()
        if snapshot is None:
            return Listing(TableFiles(None, [], []), 0, 0, FULL)
        manifests = snapshot.manifests(table.io)
        if not self.max_files or any(m.content != ManifestContent.DATA for m in manifests):
            return Listing(read_files(table, ref=ref), len(manifests), len(manifests), FULL)
        key = str(table.metadata.table_uuid)
        with self._lock:
            self._plans[key] = plans = self._plans.get(key, 0) + 1
        data, read = self._data_files(table, manifests)
        if plans % self.full_every:
            return Listing(
                TableFiles(snapshot.snapshot_id, data, []), len(manifests), read, INCREMENTAL
            )
        full = read_files(table, ref=ref)
        mismatch = full.deletes != [] or _by_path(full.data) != _by_path(data)
        if mismatch:
            log.error(
                "incremental listing of %s (snapshot %d) differed from a full one (%d files "
                "against %d): its cached manifests are dropped; the full listing is planned",
                table.name(),
                snapshot.snapshot_id,
                len(data),
                len(full.data),
            )
            self.drop(manifests)
        return Listing(full, len(manifests), read, CHECKED, mismatch)

    def drop(self, manifests: list[ManifestFile]) -> None:
        with self._lock:
            for m in manifests:
                gone = self._manifests.pop(m.manifest_path, None)
                self._files -= len(gone) if gone is not None else 0

    def _data_files(
        self, table: Table, manifests: list[ManifestFile]
    ) -> tuple[list[DataFile], int]:
        """The manifests' live data files, in manifest order; how many manifests were read."""
        got: dict[str, tuple[DataFile, ...]] = {}
        with self._lock:
            for m in manifests:
                hit = self._manifests.get(m.manifest_path)
                if hit is not None:
                    self._manifests.move_to_end(m.manifest_path)
                    got[m.manifest_path] = hit
        missing = [m for m in manifests if m.manifest_path not in got]
        if missing:
            # pyiceberg's own reading (live entries, empty files left out), in parallel
            planner = ManifestGroupPlanner(table.metadata, table.io)
            partition_of = partition_namer(table)
            lists = planner.plan_manifest_entries(missing)
            for m, entries in zip(missing, lists, strict=True):
                parts: dict[Partition, Partition] = {}  # one tuple per partition, shared
                files = []
                for e in entries:
                    p = partition_of(e.data_file)
                    files.append(describe(e.data_file, parts.setdefault(p, p), {}))
                got[m.manifest_path] = tuple(files)
            self._keep({m.manifest_path: got[m.manifest_path] for m in missing})
        return [f for m in manifests for f in got[m.manifest_path]], len(missing)

    def _keep(self, new: dict[str, tuple[DataFile, ...]]) -> None:
        with self._lock:
            for path, files in new.items():
                if path not in self._manifests:
                    self._manifests[path] = files
                    self._files += len(files)
            while self._files > self.max_files and self._manifests:
                _, gone = self._manifests.popitem(last=False)
                self._files -= len(gone)


def _by_path(files: list[DataFile]) -> list[DataFile]:
    return sorted(files, key=lambda f: f.path)


C = TypeVar("C")


class PerProcess(Generic[C]):
    """One planning cache of a kind per process (this module's, and Delta's and Hudi's
    incremental ones), made on first use and sized by the process's settings."""

    def __init__(self, make: Callable[[int, int], C]) -> None:
        self._make = make  # (files it may hold, a full plan every so many) -> the cache
        self._one: C | None = None
        self._lock = threading.Lock()

    def off(self) -> None:
        """This process plans without a cache (the API: its explain plans a table now and
        then, and its memory is sized for requests, not for a fleet's manifests)."""
        with self._lock:
            self._one = self._make(0, get_settings().plan_full_every)

    def get(self) -> C:
        """This process's cache, sized by its settings."""
        with self._lock:
            if self._one is None:
                settings = get_settings()
                self._one = self._make(settings.plan_cache_files, settings.plan_full_every)
            return self._one


_shared = PerProcess(ManifestCache)
without_cache = _shared.off
shared = _shared.get
