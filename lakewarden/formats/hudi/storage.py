"""The object-store credentials of the Hudi table a job serves, for the Python side of its
application (the timeline's listing, hudi-rs' reads of its rows and file slices).

The planner and the API pass a catalog's resolved properties to `HudiTimeline` themselves;
a Hudi job's many reads of its one table (`lakewarden.jobs.hudi`, the procedures' helpers in
`formats.hudi.jobs`) take them from here instead, set once for the job's duration by
`table_storage`. A context variable, not a module global: nothing outside that block (nor
another thread) sees them, and they never enter a plan or a log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

_TABLE: ContextVar[tuple[str, dict[str, str]] | None] = ContextVar("hudi_table", default=None)


@contextmanager
def table_storage(base_path: str, props: Mapping[str, str]) -> Iterator[None]:
    """Within the block, a table under `base_path` is read with `props` (the catalog's
    resolved properties: `s3.*`, `hadoop.*`)."""
    token = _TABLE.set((base_path.rstrip("/"), dict(props)))
    try:
        yield
    finally:
        _TABLE.reset(token)


def storage_for(path: str) -> dict[str, str]:
    """The properties `table_storage` set for the table that holds `path`, else none."""
    found = _TABLE.get()
    if found is None:
        return {}
    base, props = found
    return dict(props) if path.rstrip("/") == base or path.startswith(base + "/") else {}
