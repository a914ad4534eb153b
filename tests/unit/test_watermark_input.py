"""A bad watermark is told what to send (ISO 8601 with a UTC offset), whatever is wrong."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.schemas import WatermarkIn


@pytest.mark.parametrize(
    "bad",
    ["yesterday", "2026-13-01T00:00:00Z", "2026-11-24T00:00:00", 1, "0001-01-01T00:00:00+01:00"],
)
def test_a_bad_watermark_says_what_to_send(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        WatermarkIn.model_validate({"watermark": bad})
    assert "ISO 8601 text with a UTC offset, e.g. 2026-11-24T00:00:00Z" in str(caught.value)


def test_a_good_watermark_is_taken() -> None:
    assert WatermarkIn.model_validate({"watermark": "2026-11-24T00:00:00Z"}).watermark.tzinfo
