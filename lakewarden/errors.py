"""One line that says what went wrong, for a run's error, a task's reason and a loop's
failure: `Type: what happened`.

An error from the JVM needs reading: py4j's `Py4JJavaError` opens with the call that
failed ("An error occurred while calling o100.loadTable."), which tells an operator
nothing, and carries the Java exception below it (`: org.apache…Exception: message`, its
stack, and `Caused by: …` lines). Its headline is the Java exception's line, and the root
cause's when that is another. Read from the message text, never from the JVM: the error
may be that the JVM died.
"""

from __future__ import annotations

_THROWN = ": "  # py4j puts the Java exception's own text after this, on its second line
_CAUSE = "Caused by: "


def headline(exc: BaseException) -> str:
    """`Type: first line of the message` (for an error from the JVM, the Java exception's
    line and its root cause). Not redacted, not shortened: callers do both."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if type(exc).__name__ == "Py4JJavaError":
        first = java_headline(lines) or first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def java_headline(lines: list[str]) -> str | None:
    """The thrown Java exception's line, with `(caused by <root cause>)` when the chain has
    a different root; None when the text carries no Java exception."""
    thrown = next((ln[len(_THROWN) :].strip() for ln in lines if ln.startswith(_THROWN)), None)
    if not thrown:
        return None
    causes = [ln.strip()[len(_CAUSE) :] for ln in lines if ln.strip().startswith(_CAUSE)]
    root = causes[-1].strip() if causes else None
    return thrown if not root or root == thrown else f"{thrown} (caused by {root})"
