"""The destructive-change rule as pure logic: each section's DESTRUCTIVE fields name real
fields, and turning a section on is judged against the built-in defaults."""

from __future__ import annotations

from typing import Any

import pytest

from lakewarden.policy.model import InputModel, Policy, destructive_changes, parse_policy


def _sections() -> list[tuple[str, type[InputModel]]]:
    return [
        (name, field.annotation)
        for name, field in Policy.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, InputModel)
    ]


@pytest.mark.parametrize(("name", "section"), _sections())
def test_destructive_fields_are_fields(name: str, section: type[InputModel]) -> None:
    fields = section.model_fields
    for field, way in section.DESTRUCTIVE.items():
        assert field in fields, f"{name}.DESTRUCTIVE names {field}, not a field"
        if way == "set":
            assert fields[field].annotation is bool
    for field, guard in section.ONLY_WITH.items():
        assert field in section.DESTRUCTIVE and fields[guard].annotation is bool
    if section.DESTRUCTIVE or section.ENABLING_DELETES:
        assert "enabled" in fields, f"{name} can delete: it needs an off switch"


@pytest.mark.parametrize(
    ("before", "after", "says"),
    [
        (
            {"clean": {"enabled": False}},
            {"clean": {"max_snapshot_age_hours": 2}},
            ["enables clean with max_snapshot_age_hours 2 (below the built-in default 120)"],
        ),
        ({"clean": {"enabled": False}}, {}, []),
        ({"clean": {"enabled": False, "max_snapshot_age_hours": 900}}, {}, []),
        (
            {"clean": {"max_snapshot_age_hours": 900}},
            {},
            ["lowers clean.max_snapshot_age_hours from 900 to 120"],
        ),
        (
            {"clean": {"remove_orphans": False}},
            {"clean": {"orphan_min_age_hours": 24}},
            [
                "enables clean.remove_orphans",
                "enables clean.remove_orphans with orphan_min_age_hours 24 "
                "(below the built-in default 72)",
            ],
        ),
        ({}, {"clean": {"enabled": False, "keep_last_snapshots": 1}}, []),
        ({}, {"ttl": {"enabled": True, "column": "ts", "retention_days": 9}}, ["enables ttl"]),
        (
            {"ttl": {"enabled": True, "column": "ts", "retention_days": 9}},
            {
                "ttl": {
                    "enabled": True,
                    "column": "ts",
                    "retention_days": 9,
                    "undo_retention_days": 1,
                }
            },
            ["lowers ttl.undo_retention_days from 7 to 1"],
        ),
        (
            {},
            {"tags": {"enabled": True, "retention_days": 2}},
            ["enables tags with retention_days 2 (below the built-in default 30)"],
        ),
        (
            {"readiness": {"enabled": True, "partition": "d"}},
            {
                "readiness": {
                    "enabled": True,
                    "partition": "d",
                    "tag": True,
                    "tag_retention_days": 1,
                }
            },
            ["enables readiness.tag with tag_retention_days 1 (below the built-in default 7)"],
        ),
    ],
)
def test_changes_are_judged_by_effect(
    before: dict[str, Any], after: dict[str, Any], says: list[str]
) -> None:
    assert destructive_changes(parse_policy(before), parse_policy(after)) == says
