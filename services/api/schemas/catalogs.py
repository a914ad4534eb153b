"""The bodies of the catalog and management-rule routes: registered catalogs (secrets only
as references), the rules that adopt their tables, and a table's opt-out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    model_validator,
)

from lakewarden.policy.model import Policy
from services.api.schemas.common import (
    IDENTIFIER_PATTERN,
    TEXT_PATTERN,
    RequestModel,
    ResponseModel,
    documented_pattern,
)

# A management rule's glob (lakewarden.catalogs.adoption.GLOB): identifier characters, dots,
# * and ?.
GLOB_PATTERN = "^[A-Za-z0-9_.*?]{1,255}$"
_GLOB = documented_pattern(GLOB_PATTERN)
Glob = Annotated[str, Field(max_length=255, json_schema_extra=_GLOB)]
_RULE_NAMESPACE = (
    "namespaces this rule covers: a glob where `*` matches any run of characters, dots "
    "included (`sales*` covers `sales`, `sales_eu` and `sales.eu.daily`), `?` one character"
)
_RULE_INCLUDE = (
    "table name globs: a table is covered if its name matches one; a glob with a dot is "
    "matched against `namespace.name` instead"
)
_RULE_EXCLUDE = "table name globs (or `namespace.name` globs, with a dot) never covered"
_RULE_POLICY = (
    "the policy settings adopted tables get, over their namespace's defaults (like a "
    "table's own settings)"
)


class RuleIn(RequestModel):
    """A management rule: every table of the catalog it covers is managed by itself. When
    several rules cover a table, the most specific wins: an exact namespace over a glob,
    then the longer namespace pattern, then the lowest id."""

    namespace: str = Field(
        default="*", max_length=255, json_schema_extra=_GLOB, description=_RULE_NAMESPACE
    )
    include: list[Glob] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=100, description=_RULE_INCLUDE
    )
    exclude: list[Glob] = Field(default_factory=list, max_length=100, description=_RULE_EXCLUDE)
    policy: Policy = Field(default_factory=Policy, description=_RULE_POLICY)
    enabled: bool = Field(default=True, description="a disabled rule adopts nothing")


class RulePatch(RequestModel):
    """The fields to change; those left out keep their value. `policy` replaces the rule's
    whole policy. Tables already adopted keep the policy they were given."""

    namespace: str | None = Field(
        default=None, max_length=255, json_schema_extra=_GLOB, description=_RULE_NAMESPACE
    )
    include: list[Glob] | None = Field(
        default=None, min_length=1, max_length=100, description=_RULE_INCLUDE
    )
    exclude: list[Glob] | None = Field(default=None, max_length=100, description=_RULE_EXCLUDE)
    policy: Policy | None = Field(default=None, description=_RULE_POLICY)
    enabled: bool | None = None


class RuleOut(ResponseModel):
    id: int
    catalog: str
    namespace: str
    include: list[str]
    exclude: list[str]
    policy: dict[str, Any] = Field(description=_RULE_POLICY)
    enabled: bool
    managed_tables: int = Field(description="live tables this rule adopted")
    created_by: str | None
    created_at: datetime
    updated_at: datetime


class OptOutOut(ResponseModel):
    """A table's opt-out from auto-management."""

    catalog: str
    namespace: str
    name: str
    table_id: int
    opt_out: bool = Field(description="no management rule adopts the table while set")
    managed: bool = Field(description="lakewarden manages the table now")
    retired_reason: str | None = Field(description="why it is not managed, if it is not")
    managed_by: str = Field(description="`api` (registered) or `rule:<id>`")


# --- catalogs ---------------------------------------------------------------------------
class SecretRef(RequestModel):
    """Where a secret is kept, so that it is never stored nor echoed: an environment
    variable of the lakewarden processes, or a file they can read (a mounted secret)."""

    env: str | None = Field(default=None, min_length=1, max_length=255, pattern=r"^[A-Za-z_]\w*$")
    file: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError('give exactly one of "env" or "file"')
        return self


# Keys and values of catalog properties: no control characters (RequestModel refuses them).
PropertyKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    Field(json_schema_extra=documented_pattern(TEXT_PATTERN)),
]
PropertyText = Annotated[
    str,
    StringConstraints(max_length=4096),
    Field(json_schema_extra=documented_pattern(TEXT_PATTERN)),
]
CatalogProperties = dict[PropertyKey, PropertyText | SecretRef]


class CatalogIn(RequestModel):
    name: str = Field(
        min_length=1,
        max_length=128,
        description="the Iceberg catalog's own name (a JDBC catalog's `catalog_name`)",
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    type: Literal["jdbc", "rest", "hive", "hudi", "delta"] = Field(
        description="an Iceberg catalog (jdbc, rest, hive); `hudi`: Hudi tables by base "
        "path, `<warehouse>/<namespace>/<name>` (docs/hudi.md); `delta`: Delta tables by "
        "path, the same layout (docs/delta.md)"
    )
    properties: CatalogProperties = Field(
        description="pyiceberg's catalog properties (`uri`, `warehouse`, `credential`, "
        "`token`, `s3.*`, ...); a hudi or delta catalog: `warehouse` only; a secret only as a "
        'reference: {"env": NAME} or {"file": PATH}',
        max_length=100,
    )
    poll_interval_s: float = Field(default=30.0, ge=1, le=86400)
    poll_concurrency: int = Field(default=4, ge=1, le=64)
    region: str = Field(
        default="default",
        max_length=64,
        description="the region whose scheduler leader runs this catalog's tables: one of "
        "LAKEWARDEN_REGIONS (docs/deployment.md#regions)",
    )


class CatalogPatch(RequestModel):
    properties: dict[PropertyKey, PropertyText | SecretRef | None] | None = Field(
        default=None, description="merged; a property set to null is removed"
    )
    poll_interval_s: float | None = Field(default=None, ge=1, le=86400)
    poll_concurrency: int | None = Field(default=None, ge=1, le=64)
    region: str | None = Field(
        default=None,
        max_length=64,
        description="move the catalog's tables to this region's leader (a job running in "
        "the old region is re-planned by the new one)",
    )


class CatalogPollOut(ResponseModel):
    polled_at: datetime | None
    polled_by: str | None
    duration_ms: int | None
    tables_seen: int | None
    tables_refreshed: int | None
    catalog_requests: int | None
    commit_trigger: bool | None = Field(
        description="JDBC: commits are heard through lakewarden's trigger (false: polled only)"
    )
    error: str | None
    notification_id: int | None = Field(
        default=None,
        description="Hive: the last event of the metastore's notification log followed",
    )


class CatalogOut(ResponseModel):
    name: str
    type: str
    properties: dict[str, str | dict[str, str]] = Field(
        description="as given: secrets appear as their references"
    )
    default: bool = Field(description="the settings-configured catalog (LAKEWARDEN_CATALOG_*)")
    poll_interval_s: float
    poll_concurrency: int
    version: int
    region: str = Field(description="the region whose scheduler leader runs its tables")
    region_leader: bool = Field(
        description="that region has a live scheduler leader (false: its maintenance stalls)"
    )
    managed_tables: int
    last_poll: CatalogPollOut | None
