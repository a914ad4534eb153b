"""The per-table series /metrics renders itself (for speed) are the bytes prometheus_client
would write for the same families: odd names, a table never measured, a table with no
success, a table's rows apart, ages and scores as the client formats them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.api.routes.metrics import _HEALTH_HELP, _SUCCESS_HELP, render_table_series

ROWS = [
    (7, "prod", "sales", 'we"ird\\name\nline', 3, "clean", 12.5),
    (7, "prod", "sales", 'we"ird\\name\nline', 3, "compaction", 0.0),
    (2, "prod", "café", "orders", 40.0, None, None),
    (9, "hive", "a,b", "t=1", None, "ttl", 86400.25),
    (11, "prod", "x", "y", 100, "z_order", 1e10),
    (7, "prod", "sales", 'we"ird\\name\nline', 3, "ttl", 7.0),  # a table's rows apart
]


class _Library(Collector):
    """The same families built with the client, in the same order."""

    def collect(self) -> list[Metric]:
        labels = ["catalog", "namespace", "table"]
        health = GaugeMetricFamily("lakewarden_table_health_score", _HEALTH_HELP, labels=labels)
        success = GaugeMetricFamily(
            "lakewarden_table_last_success_age_seconds", _SUCCESS_HELP, labels=[*labels, "kind"]
        )
        seen = set()
        for table_id, catalog, namespace, name, score, kind, age in ROWS:
            if table_id not in seen and score is not None:
                health.add_metric([catalog, namespace, name], score)
            seen.add(table_id)
            if kind is not None and age is not None:
                success.add_metric([catalog, namespace, name, kind], age)
        return [health, success]


def test_the_per_table_series_are_the_clients_bytes() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Library())
    assert render_table_series(ROWS) == generate_latest(registry)


def test_no_table_still_declares_both_families() -> None:
    text = render_table_series([]).decode()
    assert text.count("# TYPE ") == 2 and "{" not in text
