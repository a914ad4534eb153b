"""The policy is law, so it must be sane: every number bounded above and below, finite and
of its own type; safety floors that take an explicit override; no control characters; and
identifiers matched whole (a trailing newline is not the same table)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import annotated_types
import pytest
from pydantic import BaseModel, ValidationError

from lakewarden.catalogs.catalog import IDENTIFIER, InvalidIdentifier, TableRef
from lakewarden.policy.model import (
    MAX_COUNT,
    MAX_DAYS,
    MAX_HOURS,
    MAX_MINUTES,
    InputModel,
    Policy,
    parse_policy,
    unsafe_input,
)


def _errors(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        parse_policy(raw)
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in info.value.errors())


def _numeric_fields() -> list[tuple[str, str, type]]:
    """(section, field, int or float) for every number of every policy section."""
    out = []
    for section, info in Policy.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for name, field in model.model_fields.items():
            types = {
                t for t in (field.annotation, *get_args(field.annotation)) if t in (int, float)
            }
            if types:
                out.append((section, name, types.pop()))
    return out


NUMERIC = _numeric_fields()
FLOATS = [(s, f) for s, f, t in NUMERIC if t is float]
INTS = [(s, f) for s, f, t in NUMERIC if t is int]


# --- finding 1: absurd numbers -----------------------------------------------------------


def test_every_number_has_an_upper_and_a_lower_bound() -> None:
    """A guard for fields added later: none may be unbounded in either direction."""
    assert len(NUMERIC) > 20
    for section, name, _ in NUMERIC:
        field = type(getattr(Policy(), section)).model_fields[name]
        kinds = {type(m) for m in field.metadata}
        assert kinds & {annotated_types.Le, annotated_types.Lt}, f"{section}.{name}: no upper bound"
        assert kinds & {annotated_types.Ge, annotated_types.Gt}, f"{section}.{name}: no lower bound"


@pytest.mark.parametrize(
    "section, field, too_big",
    [
        ("clean", "interval_minutes", 1e13),  # broke every sweep with an OverflowError
        ("ttl", "interval_minutes", MAX_MINUTES + 1),
        ("compaction", "timeout_minutes", MAX_MINUTES + 1),
        ("slo", "window_minutes", MAX_MINUTES + 1),
        ("ttl", "retention_days", MAX_DAYS + 1),
        ("clean", "max_snapshot_age_hours", MAX_HOURS + 1),
        ("clean", "orphan_min_age_hours", MAX_HOURS + 1),
        ("clean", "keep_last_snapshots", 2**70),
        ("clean", "rewrite_manifests_min_count", MAX_COUNT + 1),
        ("clustering", "min_changed_files", MAX_COUNT + 1),
        ("zorder", "max_files_per_lookup", MAX_COUNT + 1),
        ("compaction", "target_file_size_bytes", 2**63),
    ],
)
def test_absurd_numbers_are_refused(section: str, field: str, too_big: float) -> None:
    assert f"{section}.{field}: Input should be less than or equal to" in _errors(
        {section: {field: too_big}}
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"clean": {"interval_minutes": MAX_MINUTES, "max_snapshot_age_hours": MAX_HOURS}},
        {"ttl": {"interval_minutes": MAX_MINUTES, "retention_days": MAX_DAYS}},
        {"compaction": {"timeout_minutes": MAX_MINUTES}},
        {"clean": {"keep_last_snapshots": MAX_COUNT}},
    ],
)
def test_the_largest_values_still_make_valid_durations(raw: dict[str, Any]) -> None:
    policy = parse_policy(raw)
    now = datetime.now(UTC)
    for section in raw:
        for key, value in getattr(policy, section).model_dump().items():
            unit = next((u for u in ("minutes", "hours", "days") if key.endswith(u)), None)
            if unit:
                assert now - timedelta(**{unit: value}) < now  # no OverflowError


@pytest.mark.parametrize("section, field", FLOATS)
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_nan_and_infinity_are_refused_everywhere(section: str, field: str, value: float) -> None:
    assert "must be a finite number" in _errors({section: {field: value}})


@pytest.mark.parametrize("section, field", INTS)
@pytest.mark.parametrize("value", [True, False, "5", 5.0, None])
def test_counts_are_integers(section: str, field: str, value: object) -> None:
    """JSON true is not a count, "5" is not a number, 5.0 is not an int."""
    assert f"{section}.{field}: Input should be a valid integer" in _errors(
        {section: {field: value}}
    )


@pytest.mark.parametrize("section, field", FLOATS)
@pytest.mark.parametrize("value", [True, "60"])
def test_floats_are_numbers(section: str, field: str, value: object) -> None:
    assert f"{section}.{field}: Input should be a valid number" in _errors(
        {section: {field: value}}
    )


def test_a_float_field_takes_an_int_and_an_int_stays_an_int() -> None:
    p = parse_policy({"clean": {"interval_minutes": 90, "keep_last_snapshots": 7}})
    assert p.clean.interval_minutes == 90.0 and isinstance(p.clean.interval_minutes, float)
    assert p.clean.keep_last_snapshots == 7 and isinstance(p.clean.keep_last_snapshots, int)


@pytest.mark.parametrize(
    "raw",
    [
        {"compaction": {"enabled": 1}},
        {"compaction": {"enabled": "true"}},
        {"compaction": {"pool": 5}},
        {"ttl": {"column": 5}},
        {"clustering": {"columns": "id"}},
    ],
)
def test_other_types_are_strict_too(raw: dict[str, Any]) -> None:
    _errors(raw)


def test_a_stored_policy_survives_its_json_round_trip() -> None:
    """What the API stores (JSONB) and reads back validates under the strict types."""
    raw: dict[str, dict[str, Any]] = {
        "clean": {"interval_minutes": 90, "max_snapshot_age_hours": 0.5},
        "ttl": {"enabled": True, "column": "ts", "retention_days": 7},
    }
    raw["clean"]["allow_below_safety_floors"] = True
    stored = json.loads(json.dumps(parse_policy(raw).model_dump(exclude_unset=True)))
    assert parse_policy(stored) == parse_policy(raw)
    full = json.loads(json.dumps(Policy().model_dump()))
    assert parse_policy(full) == Policy()


# --- safety floors and their override ------------------------------------------------------


FLOORS = [
    ("ttl", {"enabled": True, "column": "ts", "retention_days": 0.5}, "retention_days", "1 day"),
    ("ttl", {"retention_days": 1e-9}, "retention_days", "1 day"),
    ("ttl", {"max_fraction": 1.0}, "max_fraction", "0.99"),
    ("ttl", {"max_fraction": 0.995}, "max_fraction", "0.99"),
    ("clean", {"max_snapshot_age_hours": 0.0001}, "max_snapshot_age_hours", "1 hour"),
]


@pytest.mark.parametrize("section, settings, field, floor", FLOORS)
def test_safety_floors_need_the_explicit_override(
    section: str, settings: dict[str, Any], field: str, floor: str
) -> None:
    message = _errors({section: settings})
    assert field in message and floor in message
    assert f"{section}.allow_below_safety_floors: true" in message  # says how to override
    policy = parse_policy({section: {**settings, "allow_below_safety_floors": True}})
    assert getattr(getattr(policy, section), field) == settings[field]


def test_at_the_floor_no_override_is_needed() -> None:
    p = parse_policy(
        {
            "ttl": {"retention_days": 1, "max_fraction": 0.99},
            "clean": {"max_snapshot_age_hours": 1, "keep_last_snapshots": 1},
        }
    )
    assert not p.ttl.allow_below_safety_floors and not p.clean.allow_below_safety_floors


@pytest.mark.parametrize(
    "section, settings, field",
    [
        ("ttl", {"retention_days": 0}, "retention_days"),
        ("ttl", {"retention_days": -1}, "retention_days"),
        ("ttl", {"max_fraction": 1.01}, "max_fraction"),
        ("ttl", {"max_fraction": 0}, "max_fraction"),
        ("clean", {"max_snapshot_age_hours": 0}, "max_snapshot_age_hours"),
        ("clean", {"keep_last_snapshots": 0}, "keep_last_snapshots"),
        ("clean", {"orphan_min_age_hours": 1}, "orphan_min_age_hours"),
    ],
)
def test_hard_bounds_hold_even_with_the_override(
    section: str, settings: dict[str, Any], field: str
) -> None:
    message = _errors({section: {**settings, "allow_below_safety_floors": True}})
    assert f"{section}.{field}" in message


def test_the_override_is_a_boolean() -> None:
    assert "valid boolean" in _errors({"ttl": {"allow_below_safety_floors": "yes"}})


# --- control characters in policy strings --------------------------------------------------


@pytest.mark.parametrize(
    "raw, where",
    [
        ({"compaction": {"pool": "default\n"}}, "compaction.pool"),
        ({"compaction": {"pool": "de\x00fault"}}, "compaction.pool"),
        ({"ttl": {"column": "ts\n"}}, "ttl.column"),
        ({"clustering": {"columns": ["id", "region\x7f"]}}, "clustering.columns"),
        ({"ttl": {"level": "row\t"}}, "ttl.level"),
    ],
)
def test_control_characters_in_policy_strings_are_refused(raw: dict[str, Any], where: str) -> None:
    message = _errors(raw)
    assert where in message and "control character" in message


def test_unsafe_input_walks_everything() -> None:
    assert unsafe_input({"a": [1, {"b": "x\x00"}]}, where="body") == (
        "body.a[1].b contains the control character U+0000 at position 1: remove it"
        " (tabs and newlines only in free text)"
    )
    assert "a key of body" in (unsafe_input({"k\x01": 1}, where="body") or "")
    assert (
        unsafe_input({"n": [float("nan")]}, where="x") == "x.n[0] must be a finite number, not nan"
    )
    assert unsafe_input("line one\n\tline two", free_text=True) is None
    assert unsafe_input("bell\x07", free_text=True) is not None
    assert unsafe_input("nul\x00", free_text=True) is not None
    assert unsafe_input("tab\t") is not None
    assert unsafe_input({"ok": ["é", 1, 2.5, None, True]}) is None


def test_free_text_fields_are_declared_per_model() -> None:
    class Note(InputModel):
        FREE_TEXT = frozenset({"text"})
        title: str
        text: str

    assert Note.model_validate({"title": "t", "text": "a\nb\tc"}).text == "a\nb\tc"
    with pytest.raises(ValidationError, match="title contains the control character U\\+000A"):
        Note.model_validate({"title": "t\n", "text": "x"})
    with pytest.raises(ValidationError, match="text contains the control character U\\+0000"):
        Note.model_validate({"title": "t", "text": "x\x00"})


# --- finding 3: identifiers match whole ----------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["sec\n", "sec\r\n", "\nsec", "se\nc", "sec ", "", "1sec", "a" * 129]
)
def test_identifiers_match_whole(bad: str) -> None:
    assert IDENTIFIER.match(bad) is None
    with pytest.raises(InvalidIdentifier):
        TableRef(bad, "t1")
    with pytest.raises(InvalidIdentifier):
        TableRef("sec", bad)
    assert "ttl" in _errors({"ttl": {"column": bad}})  # a column name is an identifier too


def test_a_trailing_newline_is_not_the_same_table() -> None:
    assert TableRef("sec", "t1").dotted == "sec.t1"
    with pytest.raises(InvalidIdentifier):
        TableRef.parse("sec.t1\n")
    assert IDENTIFIER.match("a" * 128)
