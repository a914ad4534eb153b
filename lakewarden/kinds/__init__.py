"""The maintenance kinds lakewarden runs, one module each, collected in `REGISTRY`."""

from __future__ import annotations

from lakewarden.kinds import clean, compaction, stats, ttl
from lakewarden.kinds import clustering as layout
from lakewarden.kinds.base import Kind
from lakewarden.policy.model import KINDS

REGISTRY: dict[str, Kind] = {
    k.name: k
    for k in (
        compaction.KIND,
        layout.CLUSTERING,
        layout.ZORDER,
        ttl.KIND,
        clean.KIND,
        stats.KIND,
    )
}
if tuple(REGISTRY) != KINDS:  # the kinds are the policy's sections, one Kind each
    raise ImportError(f"kinds {tuple(REGISTRY)} differ from the policy's sections {KINDS}")


def get_kind(name: str) -> Kind:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown task kind {name!r}: use one of {', '.join(REGISTRY)}") from None
