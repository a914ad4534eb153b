"""The default catalog's extra properties (LAKEWARDEN_CATALOG_PROPERTIES): merged into its
entry beside the URI and warehouse, references resolved, secrets refused as values."""

from __future__ import annotations

import pytest

from lakewarden.catalogs.catalog import CatalogConfigError, default_entry
from lakewarden.catalogs.registry import CatalogRegistry
from lakewarden.settings import Settings

PG = "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw"


def test_the_environment_gives_them_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "LAKEWARDEN_CATALOG_PROPERTIES",
        '{"s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": {"env": "LW_SECRET_K"}}',
    )
    monkeypatch.setenv("LW_SECRET_K", "AKIAEXAMPLEKEY")
    settings = Settings(warehouse="s3://lake/wh")
    entry = default_entry(settings, PG)
    assert entry.properties["s3.endpoint"] == "http://127.0.0.1:9000"
    assert entry.properties["warehouse"] == "s3://lake/wh"
    assert entry.resolved["s3.access-key-id"] == "AKIAEXAMPLEKEY"


@pytest.mark.parametrize("key", ["uri", "warehouse"])
def test_the_uri_and_warehouse_have_their_own_settings(key: str) -> None:
    with pytest.raises(ValueError, match=f"may not set '{key}'"):
        default_entry(Settings(catalog_properties={key: "x"}), PG)


def test_a_secret_as_a_value_is_refused_naming_the_setting_not_the_value() -> None:
    settings = Settings(catalog_properties={"s3.secret-access-key": "wJalrXUtnFEMIK7MDENG"})
    with pytest.raises(CatalogConfigError) as err:
        CatalogRegistry(settings, PG, engine=None)  # type: ignore[arg-type]
    assert "LAKEWARDEN_CATALOG_PROPERTIES" in str(err.value)
    assert "s3.secret-access-key" in str(err.value)
    assert "wJalrXUtnFEMIK7MDENG" not in str(err.value)


def test_a_reference_the_rules_refuse_is_refused() -> None:
    settings = Settings(catalog_properties={"s3.secret-access-key": {"env": "HOME"}})
    with pytest.raises(CatalogConfigError, match="LAKEWARDEN_CATALOG_PROPERTIES"):
        CatalogRegistry(settings, PG, engine=None)  # type: ignore[arg-type]
