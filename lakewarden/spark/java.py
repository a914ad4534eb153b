"""Walking the JVM's collections from Python (py4j)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def each(java_iterable: Any) -> Iterator[Any]:
    """The items of a Java `Iterable` (a py4j proxy), one call to the JVM per item."""
    it = java_iterable.iterator()
    while it.hasNext():
        yield it.next()
