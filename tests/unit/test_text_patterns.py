"""The OpenAPI's text patterns refuse exactly the characters the API refuses
(lakewarden.policy.model's CONTROL_CHARACTERS), so a fuzzer reading the spec and a client
reading it agree with the server."""

from __future__ import annotations

import re

from lakewarden.policy.model import _CONTROL_IN_FREE_TEXT, CONTROL_CHARACTERS
from services.api.schemas import FREE_TEXT_PATTERN, TEXT_PATTERN


def test_text_patterns_refuse_what_the_api_refuses() -> None:
    # fullmatch: Python's `$` also matches before a final newline, JSON Schema's does not.
    text, free = re.compile(TEXT_PATTERN), re.compile(FREE_TEXT_PATTERN)
    for code in range(0x3000):
        ch = chr(code)
        assert (text.fullmatch(ch) is None) == bool(CONTROL_CHARACTERS.search(ch)), hex(code)
        assert (free.fullmatch(ch) is None) == bool(_CONTROL_IN_FREE_TEXT.search(ch)), hex(code)
