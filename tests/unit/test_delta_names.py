"""A Delta commit's summary (commitInfo and actions), the protocol lakewarden reads, and
the size histogram of a Delta table's health."""

from __future__ import annotations

import json

import pytest

from lakewarden.formats.base import JobMarker, marker_of
from lakewarden.formats.delta.timeline import UnsupportedProtocol, check_protocol, summarize
from lakewarden.health.delta import size_histogram


def test_a_spark_commit_s_user_metadata_carries_the_job_mark() -> None:
    """Spark writes one free-form field, `userMetadata`; delta-rs writes custom keys at the
    top of commitInfo: the mark is found in either."""
    info = {
        "operation": "OPTIMIZE",
        "operationParameters": {"predicate": ["day = 'd1'"], "zOrderBy": '["a","b"]'},
        "operationMetrics": {"numAddedFiles": "1", "numRemovedFiles": "8"},
        "userMetadata": json.dumps({"lakewarden.task-id": "7", "lakewarden.attempt": "2"}),
        "readVersion": 4,
        "writerTag": "etl",
    }
    actions = [
        {"add": {"path": "a", "size": 100, "deletionVector": {"cardinality": 3}}},
        {"add": {"path": "b", "size": 50}},
        {"remove": {"path": "c", "size": 10}},
    ]
    s = summarize(info, actions)
    assert (s["files-added"], s["files-removed"]) == ("2", "1")
    assert (s["bytes-added"], s["bytes-removed"], s["deletion-vectors-added"]) == ("150", "10", "1")
    assert s["metric.numRemovedFiles"] == "8" and s["read-version"] == "4"
    assert s["param.predicate"] == "[\"day = 'd1'\"]" and s["param.zOrderBy"] == '["a","b"]'
    assert s["extra.writerTag"] == "etl"
    assert marker_of(s) == JobMarker(7, 2)
    assert marker_of(summarize({"userMetadata": "not json"}, [])) is None
    assert marker_of(summarize({"lakewarden.task-id": "9"}, [])) == JobMarker(9)


def test_protocols_lakewarden_cannot_read_are_named() -> None:
    check_protocol("/t", 1, None)
    check_protocol("/t", 3, ["deletionVectors", "columnMapping"])
    with pytest.raises(UnsupportedProtocol, match="reader version 4"):
        check_protocol("/t", 4, None)
    with pytest.raises(UnsupportedProtocol, match="catalogManaged"):
        check_protocol("/t", 3, ["deletionVectors", "catalogManaged"])


def test_file_sizes_are_bucketed_against_the_target() -> None:
    target = 1600
    sizes = [1, 99, 100, 399, 400, 1199, 1200, 1599, 1600, 5000]
    assert size_histogram(sizes, target) == {
        "<1/16": 2,
        "1/16-1/4": 2,
        "1/4-3/4": 2,
        "3/4-1": 2,
        ">=1": 2,
    }
