"""One log format for every lakewarden process, with secrets masked and the task in view.

`setup_logging()` configures the root logger once per process (the CLI's services, a
submitted Spark application): `LAKEWARDEN_LOG_FORMAT=text` (a line per record) or `json`
(an object per line, for a log pipeline). Every handler on the root logger gets

- the `RedactingFilter`: no secret of ours reaches a log, whatever a library says;
- the `ContextFilter`: the fields bound by `log_context(task_id=..., table=..., attempt=...)`
  (a contextvar, so concurrent threads and tasks keep their own) are added to each record
  logged inside the block, so every line about a task names it.

Uvicorn's loggers propagate to the root handlers (see `services/api/app.py`), so the API's
access log has the same format.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from lakewarden.redact import RedactingFilter, secrets_of
from lakewarden.settings import Settings, get_settings

# The fields a context may bind, in the order a text line shows them.
CONTEXT_FIELDS = ("task_id", "table", "attempt")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]%(context)s %(message)s"
# JSON: `time` (ISO 8601, UTC), then these, renamed.
JSON_FIELDS = ("levelname", "name", "threadName", "message")
JSON_NAMES = {"levelname": "level", "name": "logger", "threadName": "thread"}
_JSON_KEYS = {
    "time",
    *(JSON_NAMES.get(f, f) for f in JSON_FIELDS),
    *CONTEXT_FIELDS,
    "exc_info",
    "stack_info",
}
NOISY_LOGGERS = ("py4j", "httpx", "httpcore", "pyiceberg", "alembic")

_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "lakewarden_log_context", default=MappingProxyType({})
)


@contextmanager
def log_context(
    *, task_id: int | None = None, table: str | None = None, attempt: int | None = None
) -> Iterator[None]:
    """Bind the task's id, table (`catalog.namespace.name`) and attempt to every record
    logged inside the block; nested blocks add to (and may override) the outer ones. `None`
    values are left out."""
    fields = {"task_id": task_id, "table": table, "attempt": attempt}
    bound = {**_context.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(MappingProxyType(bound))
    try:
        yield
    finally:
        _context.reset(token)


def current_log_context() -> Mapping[str, Any]:
    """The fields bound here now (a thread started inside a block does not inherit them:
    bind again in the thread's own function)."""
    return _context.get()


class ContextFilter(logging.Filter):
    """Adds the bound fields to a record as attributes (JSON shows them as keys) and as
    `context`, their text form (` task_id=7 table=lake.db.t attempt=2`, or empty)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _context.get()
        for name, value in bound.items():
            setattr(record, name, value)
        record.context = "".join(f" {k}={v}" for k, v in bound.items())
        return True


class RedactedJsonFormatter(JsonFormatter):
    """JSON lines with only what the redacting filter has seen: the standard fields, the
    bound context, and the traceback `RedactingFilter` masked (python-json-logger would
    format `exc_info` afresh, bringing secrets back). A record's other attributes (a
    library's `extra=`, uvicorn's `color_message`) are left out: nothing masked them."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        for key in list(log_data):
            if key not in _JSON_KEYS:
                del log_data[key]
        if record.exc_text:
            log_data["exc_info"] = record.exc_text


def make_formatter(log_format: str) -> logging.Formatter:
    """The formatter for `LAKEWARDEN_LOG_FORMAT` (`text` or `json`)."""
    if log_format == "json":
        return RedactedJsonFormatter(list(JSON_FIELDS), rename_fields=JSON_NAMES, timestamp="time")
    return logging.Formatter(TEXT_FORMAT)


def install_filters(handler: logging.Handler, secrets: list[str]) -> None:
    """Put the redacting and the context filter on `handler` (handler filters see every
    record the handler writes; a logger's filter would miss its children's records).
    Called again (a second setup), it replaces them rather than adding more."""
    for old in [f for f in handler.filters if isinstance(f, RedactingFilter | ContextFilter)]:
        handler.removeFilter(old)
    handler.addFilter(RedactingFilter(secrets))
    handler.addFilter(ContextFilter())


def setup_logging(settings: Settings | None = None, *db_urls: str | None) -> None:
    """Configure this process's logging from `settings` (default: the environment):
    level, format, and on every root handler the redacting and context filters.
    `db_urls`: database URLs in use whose passwords settings may not name."""
    s = settings or get_settings()
    root = logging.getLogger()
    if not root.handlers:  # as basicConfig: a host (pytest) that set handlers keeps them
        handler = logging.StreamHandler()
        handler.setFormatter(make_formatter(s.log_format))
        root.addHandler(handler)
    root.setLevel(s.log_level.upper())
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    secrets = secrets_of(s, *db_urls)
    for h in root.handlers:
        install_filters(h, secrets)
