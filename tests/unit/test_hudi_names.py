"""Hudi's timeline file names (both layouts) and the histograms of a Hudi table's health."""

from __future__ import annotations

from lakewarden.formats.hudi.timeline import parse_instant
from lakewarden.health.hudi import MB, explain_services, size_histogram, slice_histogram
from lakewarden.kinds.base import Verdict


def test_instant_file_names_of_both_layouts() -> None:
    done = parse_instant("20261125230028505_20261125230055805.deltacommit")
    assert done is not None and (done.requested, done.completed) == (
        "20261125230028505",
        "20261125230055805",
    )
    assert done.state == "completed" and done.seq == 20261125230055805
    plan = parse_instant("20261125230942635.compaction.requested")
    assert plan is not None and (plan.action, plan.state) == ("compaction", "requested")
    cow = parse_instant("20261125230717365.inflight")  # a commit's inflight has no action
    assert cow is not None and (cow.action, cow.state) == ("commit", "inflight")
    v6 = parse_instant("20240101120000123.commit")  # layout 1: no completion time
    assert v6 is not None and v6.state == "completed" and v6.seq == 20240101120000123
    assert parse_instant("hoodie.properties") is None
    assert parse_instant("history") is None


def test_histograms_bucket_every_file() -> None:
    sizes = [1 * MB, 20 * MB, 99 * MB, 100 * MB, 200 * MB]
    assert size_histogram(sizes) == {
        "<16MB": 1,
        "16-64MB": 1,
        "64-100MB": 1,
        "100-128MB": 1,
        ">=128MB": 1,
    }
    assert slice_histogram([0, 2, 2, 9]) == {"0": 1, "2": 2, "8+": 1}


def test_explain_says_per_service_what_is_due_and_why() -> None:
    verdicts = {
        "compaction": Verdict(False, "copy-on-write: no log files, nothing to compact"),
        "clean": Verdict(True, "3 files ...", {"cleanable_files": 3}),
        "clustering": Verdict(False, "clustering is disabled by policy"),
    }
    compaction, clean, clustering = explain_services(verdicts)
    assert not compaction["due"] and "copy-on-write" in compaction["reason"]
    assert "lakewarden's compaction kind" in compaction["reason"]
    assert clean["due"] and clean["metrics"] == {"cleanable_files": 3}
    assert clustering["service"] == "clustering" and "disabled" in clustering["reason"]
