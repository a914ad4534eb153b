"""The maintenance kinds lakewarden runs, one module each, collected in `REGISTRY`."""

from __future__ import annotations

from lakewarden.kinds import clean, compaction, layout, ttl
from lakewarden.kinds.base import Kind

REGISTRY: dict[str, Kind] = {
    k.name: k for k in (compaction.KIND, layout.CLUSTERING, layout.ZORDER, ttl.KIND, clean.KIND)
}


def get_kind(name: str) -> Kind:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown task kind {name!r}: use one of {', '.join(REGISTRY)}") from None
