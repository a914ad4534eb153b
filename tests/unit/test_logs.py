"""lakewarden.logs: one format (text or JSON), the task bound to its lines, secrets masked."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import uvicorn

from lakewarden.logs import install_filters, log_context, make_formatter, setup_logging
from lakewarden.settings import Settings

SLACK = "https://hooks.slack.com/services/T0000/B0000/sEcReTtOkEn42"


class FreshRoot:
    """setup_logging as in a fresh process (a root logger without handlers), writing to
    `stream`; the root's own handlers (pytest's) come back afterwards."""

    # An in-process uvicorn started by another test (its default log config) leaves these
    # with handlers of their own and propagate off; a fresh process has neither.
    UVICORN = ("uvicorn", "uvicorn.access", "uvicorn.error")

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.saved: list[logging.Handler] | None = None
        self.level = logging.getLogger().level
        self.uvicorn = {
            name: (lg.handlers[:], lg.propagate)
            for name in self.UVICORN
            for lg in [logging.getLogger(name)]
        }

    def setup(self, log_format: str) -> None:
        root = logging.getLogger()
        if self.saved is None:
            self.saved = root.handlers[:]
        root.handlers.clear()
        for name in self.UVICORN:
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
        settings = Settings.model_validate({"log_format": log_format, "alert_slack_url": SLACK})
        setup_logging(settings)
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(self.stream)

    def restore(self) -> None:
        root = logging.getLogger()
        if self.saved is not None:
            root.handlers[:] = self.saved
        root.setLevel(self.level)
        for name, (handlers, propagate) in self.uvicorn.items():
            logging.getLogger(name).handlers[:] = handlers
            logging.getLogger(name).propagate = propagate


@pytest.fixture
def fresh() -> Iterator[FreshRoot]:
    root = FreshRoot()
    try:
        yield root
    finally:
        root.restore()


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_task_inside_a_context_and_no_secret(
    fresh: FreshRoot,
) -> None:
    fresh.setup("json")
    log = logging.getLogger("lakewarden.test")
    log.info("before")
    with log_context(task_id=7, table="lake.db.t", attempt=2):
        log.info("posting to %s", SLACK)
        try:
            raise RuntimeError(f"refused: {SLACK}")
        except RuntimeError:
            log.exception("delivery failed")
    log.info("after")

    before, posting, failed, after = _json_lines(fresh.stream)
    assert before["message"] == "before" and before["level"] == "INFO"
    assert {"time", "logger", "thread"} <= before.keys()
    assert datetime.fromisoformat(str(before["time"])).utcoffset() == timedelta(0)
    assert "task_id" not in before and "task_id" not in after
    for line in (posting, failed):
        assert (line["task_id"], line["table"], line["attempt"]) == (7, "lake.db.t", 2)
    assert "RuntimeError" in str(failed["exc_info"])
    assert "sEcReTtOkEn42" not in fresh.stream.getvalue()


def test_text_lines_show_the_context(fresh: FreshRoot) -> None:
    fresh.setup("text")
    with log_context(task_id=3, table="lake.db.t"), log_context(attempt=1):
        logging.getLogger("lakewarden.test").warning("slow")
    (line,) = fresh.stream.getvalue().splitlines()
    assert line.endswith("task_id=3 table=lake.db.t attempt=1 slow")


def test_a_context_belongs_to_its_thread() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter("json"))
    install_filters(handler, [])
    log = logging.getLogger("lakewarden.test.threads")
    log.addHandler(handler)
    log.propagate = False
    try:
        with log_context(task_id=1):
            other = threading.Thread(target=lambda: log.warning("elsewhere"))
            other.start()
            other.join()
            log.warning("here")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    elsewhere, here = _json_lines(stream)
    assert "task_id" not in elsewhere and here["task_id"] == 1


def test_uvicorn_logs_through_the_same_handlers(fresh: FreshRoot) -> None:
    fresh.setup("json")
    # As services/api/app.py main() runs uvicorn: log_config=None.
    uvicorn.Config(app=lambda *_: None, log_config=None, log_level="info").configure_logging()
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/x?u={SLACK}", "1.1", 200
    )
    logging.getLogger("uvicorn.error").info("up", extra={"color_message": SLACK})
    line, other = _json_lines(fresh.stream)
    assert line["logger"] == "uvicorn.access" and "GET /x" in str(line["message"])
    assert set(other) == {"time", "level", "logger", "thread", "message"}  # no unmasked extra
    assert "sEcReTtOkEn42" not in fresh.stream.getvalue()


def test_a_second_setup_does_not_stack_filters(fresh: FreshRoot) -> None:
    fresh.setup("text")
    handler = logging.getLogger().handlers[0]
    setup_logging(Settings())
    assert logging.getLogger().handlers == [handler] and len(handler.filters) == 2
