"""Schemathesis against the served OpenAPI spec, with all its checks: no 5xx (bad input gets
a 4xx that says what to fix), every status and body as documented (one error body,
`ErrorOut`), schema-valid input accepted and invalid input refused, a deleted resource gone,
a created one there, `Allow` listing every method of a path. It found ids beyond bigint
reaching Postgres as 500s, undocumented 404/409s, 422 bodies that did not match the spec,
query values and names the spec allowed but the API refused, and an incomplete `Allow`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_test_runtime
from helpers import api_process, append_batches, issue_token, make_table
from sqlalchemy import text

# All checks are on (no `--checks` on the command line: it would override the per-operation
# settings below). What is switched off, where, and why:
CONFIG = """
# positive_data_acceptance ("schema-valid input is accepted") is off for the operations
# whose bodies have rules JSON Schema cannot state, so schema-valid bodies get a correct 422:
# - a policy (POST /tables, both PUT .../policy): rules across fields (safety floors that
#   need allow_below_safety_floors, a layout that needs columns, ...), and strict integers:
#   JSON Schema calls 5.0 an integer, the policy refuses it like "5" (lakewarden.policy.model);
# - POST /events: snapshot_id must be a snapshot in the table's metadata (the 422 names the
#   current one), and is a strict integer: a float has lost the digits of a 64-bit id;
#   a Hudi or Delta table's `commit` must be in its log; POST /events/hudi: the base path
#   must be a managed Hudi table's (else a 404);
# - a catalog (POST, PATCH): it must answer with the properties given (a 422 says it does
#   not); a management rule (POST, PATCH): a policy, checked over the namespaces' defaults;
# - POST /tokens: a lifetime at most LAKEWARDEN_TOKEN_MAX_DAYS and no longer than the
#   minting token's (a setting and the caller's own token, not the schema's bounds).
# Every other check still runs on them, and positive_data_acceptance on all the others.
[[operations]]
include-name = [
    "POST /api/v1/tables",
    "POST /api/v1/catalogs/{catalog}/tables",
    "PUT /api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy",
    "PUT /api/v1/catalogs/{catalog}/namespaces/{namespace}/policy",
    "POST /api/v1/events",
    "POST /api/v1/events/batch",
    "POST /api/v1/events/hudi",
    "POST /api/v1/catalogs",
    "PATCH /api/v1/catalogs/{name}",
    "POST /api/v1/catalogs/{catalog}/rules",
    "PATCH /api/v1/catalogs/{catalog}/rules/{rule_id}",
    "POST /api/v1/tokens",
]
checks.positive_data_acceptance.enabled = false

# Schemathesis takes the {name} of .../{name}/tasks and .../{name}/blockers for the name of
# the Task or Blocker resource (a component it finds by that name), so its stateful phase
# passes a task's or blocker's id as the table's name ("tables/sales/13/tasks"): the 422
# for that name is right. Positive data acceptance for these operations is checked in the
# other phases.
[[operations]]
include-name = [
    "POST /api/v1/catalogs/{catalog}/tables/{namespace}/{name}/tasks",
    "POST /api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers",
    "GET /api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers",
    "DELETE /api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers/{blocker_id}",
]
phases.stateful.checks.positive_data_acceptance.enabled = false

# The batch endpoint refuses a schema-violating notification (a table name that is not an
# identifier, say) on its own item, with that item's 422, and ingests the others: a 202 for
# the batch is its contract (routes/events.py), so negative data is not refused whole.
[[operations]]
include-name = ["POST /api/v1/events/batch"]
checks.negative_data_rejection.enabled = false

# The list cursors are opaque: one the API never gave (any string fits the schema) is a 422.
[[operations]]
include-name = ["GET /api/v1/tables"]
checks.positive_data_acceptance.enabled = false
"""
# Not applicable, so they pass vacuously: ignored_auth and object_level_authorization (the
# OpenAPI declares no security scheme, so the fuzzer does not know which calls need the
# credential; tests/integration/test_access.py checks 401 and 403 route by route),
# missing_required_header and response_headers_conformance (no header is required or
# documented).

# The fuzzer calls as an admin (--header), and revokes tokens too: ids it makes up, and
# those it has seen in GET /api/v1/tokens, its own among them. Revoked, its own token
# would get nothing but 401s from there on, so a revocation of it goes to the next id.
HOOKS = """
import os

import schemathesis

OWN = os.environ["FUZZER_TOKEN_ID"]


@schemathesis.hook
def before_call(context, case, kwargs):
    if str((case.path_parameters or {}).get("token_id")) == OWN:
        case.path_parameters["token_id"] = int(OWN) + 1
"""


def test_the_api_keeps_its_contract_under_fuzzing(db_url: str, tmp_path: Path) -> None:
    beside = Path(sys.executable).parent / "st"
    st = str(beside) if beside.exists() else shutil.which("st")
    if st is None:
        pytest.skip("schemathesis is not installed (it is a dev dependency)")
    rt = make_test_runtime(db_url, tmp_path)
    append_batches(make_table(rt), 2)  # a real table the fuzzer may hit by name
    secret = issue_token(rt, name="fuzzer")  # an admin: every operation is reached
    with rt.engine.connect() as conn:
        own = conn.scalar(text("SELECT id FROM api_tokens WHERE name = 'fuzzer'"))
    rt.engine.dispose()
    # The fuzzer's one token makes thousands of changes in a few minutes.
    with api_process(db_url, tmp_path, mutations_per_minute="1000000") as url:
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG)
        hooks = tmp_path / "hooks.py"
        hooks.write_text(HOOKS)
        result = subprocess.run(
            [
                st,
                "--config-file",
                str(config),
                "run",
                f"{url}/openapi.json",
                "--header",
                f"Authorization: Bearer {secret}",
                # Under a minute on 2 cores, most of it the coverage phase (systematic: every
                # boundary, every missing or wrong-typed field, every unexpected method, whatever
                # this number is); 10 random examples per operation on top of it.
                "--max-examples",
                "10",
                "--seed",
                "1",
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(hooks), "FUZZER_TOKEN_ID": str(own)},
        )
        log = (tmp_path / "api.log").read_text()
        assert result.returncode == 0, _failures(result.stdout) + log[-3000:]


def _failures(report: str) -> str:
    """Schemathesis's FAILURES section (each failing case, its check and how to replay it),
    not its WARNINGS that follow (which alone filled a 4,000-character tail once)."""
    start = report.find("= FAILURES =")
    end = report.find("= WARNINGS =", start)
    section = report[start:end] if start >= 0 else report
    return section[-8000:]
