"""Catalog secrets (issue 23, hole 2): a `{"file": …}` reference names only a regular file
in the secrets directory, an `{"env": …}` one only a `LW_SECRET_*` variable; an error of
using a catalog never quotes a value read from a reference, nor any part of it; a secret
given by value (by its key, or by how it looks) is refused without being repeated.

The catalogs are checked against a real HTTP endpoint that plays an Iceberg REST catalog
and, on its `/echo` paths, answers 400 quoting everything it was sent (path, query,
headers, body): what a hostile or chatty catalog would do with a credential."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import free_port, serve_http
from sqlalchemy import text

from lakewarden.db.models import Catalog
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime

USE_A_REFERENCE = "give it as a reference"
OUTSIDE_RULE = "not inside the secrets directory"


@dataclass
class Catalogs:
    """The playing REST catalog: `/ok` answers as an empty catalog, `/echo` (or every path,
    once `echo_everything`) with a 400 quoting the request."""

    url: str
    echo_everything: list[bool] = field(default_factory=lambda: [False])


@pytest.fixture
def rest() -> Iterator[Catalogs]:
    state = Catalogs("")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode(errors="replace") if length else ""
            if self.path.startswith("/echo") or state.echo_everything[0]:
                said = f"{self.command} {self.path} {dict(self.headers)} {body}"
                self._json(400, _error(said))
            elif "/config" in self.path:
                self._json(200, {"defaults": {}, "overrides": {}})
            elif "/namespaces" in self.path:
                self._json(200, {"namespaces": []})
            elif "/oauth/tokens" in self.path:
                self._json(200, {"access_token": "t", "token_type": "bearer"})
            else:
                self._json(404, _error("no such route"))

        do_GET = do_POST = do_HEAD = _answer

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server, state.url = serve_http(Handler)
    yield state
    server.shutdown()


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestException", "code": 400}}


@dataclass
class Seeded:
    refs: dict[str, dict[str, str]]  # a name for each reference -> the reference
    markers: list[str]  # what must never be seen in a response or an audit row


def _seed(rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    """A secret in the secrets directory and its variable twin (allowed, unique markers),
    a secret outside it, reached by absolute path, `..` and a symlink inside, the host's
    /etc/passwd and /proc/self/environ, and lakewarden's own database URL variable."""
    tag = uuid.uuid4().hex[:8]
    secrets = rt.settings.secrets_path
    secrets.mkdir(parents=True, exist_ok=True)
    inside = f"INSIDE-{tag}-Marker"
    (secrets / "catalog-token").write_text(inside + "\n")
    outside_dir = tmp_path / "elsewhere"
    outside_dir.mkdir()
    outside = f"OUTSIDE-{tag}-Marker"
    (outside_dir / "secret").write_text(outside + "\n")
    (secrets / "link").symlink_to(outside_dir / "secret")
    os.mkfifo(secrets / "fifo")
    env_ok = f"ENVOK-{tag}-Marker"
    monkeypatch.setenv("LW_SECRET_CATALOG_TOKEN", env_ok)
    db_marker = f"DBURL-{tag}-Marker"
    monkeypatch.setenv("LAKEWARDEN_DATABASE_URL", f"postgresql://lw:{db_marker}@h:1/x")
    monkeypatch.setenv("LW_OTHER_VARIABLE", f"OTHERVAR-{tag}-Marker")
    passwd = [line for line in Path("/etc/passwd").read_text().splitlines() if line]
    environ = [e for e in Path("/proc/self/environ").read_text().split("\0") if len(e) >= 12]
    return Seeded(
        refs={
            "inside": {"file": "catalog-token"},
            "inside_absolute": {"file": str(secrets / "catalog-token")},
            "env_ok": {"env": "LW_SECRET_CATALOG_TOKEN"},
            "outside": {"file": str(outside_dir / "secret")},
            "dotdot": {"file": "../elsewhere/secret"},
            "symlink": {"file": "link"},
            "fifo": {"file": "fifo"},
            "passwd": {"file": "/etc/passwd"},
            "environ": {"file": "/proc/self/environ"},
            "db_url": {"env": "LAKEWARDEN_DATABASE_URL"},
            "other_variable": {"env": "LW_OTHER_VARIABLE"},
        },
        markers=[inside, outside, env_ok, db_marker, f"OTHERVAR-{tag}", *passwd, *environ],
    )


# Where a reference's value goes: every property a REST catalog sends or parses.
POSITIONS = ("uri", "credential", "token", "warehouse", "prefix", "header.X-Tenant", "scope")
ALLOWED = ("inside", "inside_absolute", "env_ok")


def _bodies_of_every_attempt(client: TestClient, rest: Catalogs, seeded: Seeded) -> list[str]:
    """Register (and change) catalogs with each reference in each position; every answer
    (each a 422). A refused reference is refused whatever its position: two are enough."""
    bodies = []
    closed = free_port()
    bases = {
        "rest": (f"{rest.url}/echo", f"http://127.0.0.1:{closed}"),
        "jdbc": (f"postgresql://127.0.0.1:{closed}/x",),
    }
    for ref_name, ref in seeded.refs.items():
        for position in POSITIONS if ref_name in ALLOWED else ("uri", "token"):
            for kind in ("rest", "jdbc"):
                for base in bases[kind] if position != "uri" else ("",):
                    properties: dict[str, Any] = {"uri": base, position: ref}
                    body = {"name": f"c_{kind}", "type": kind, "properties": properties}
                    r = client.post("/api/v1/catalogs", json=body)
                    assert r.status_code == 422, (ref_name, position, kind, r.text)
                    bodies.append(r.text)
                    if ref_name not in ALLOWED:
                        detail = r.json()["detail"]
                        rule = "LW_SECRET_" if "env" in ref else OUTSIDE_RULE
                        if ref_name == "fifo":
                            rule = "not a regular file"
                        assert rule in detail, (ref_name, position, detail)
                    if kind == "rest":
                        r = client.patch("/api/v1/catalogs/good", json={"properties": properties})
                        assert r.status_code == 422, (ref_name, position, r.text)
                        bodies.append(r.text)
    return bodies


def test_no_reference_leaks_through_any_error_response_or_audit_row(
    client: TestClient,
    rt: Runtime,
    rest: Catalogs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seeded = _seed(rt, tmp_path, monkeypatch)
    good = {
        "name": "good",
        "type": "rest",
        "properties": {
            "uri": f"{rest.url}/ok",
            "token": seeded.refs["inside"],
            "warehouse": seeded.refs["env_ok"],
        },
    }
    r = client.post("/api/v1/catalogs", json=good)
    assert r.status_code == 201, r.text
    bodies = [r.text]
    bodies += _bodies_of_every_attempt(client, rest, seeded)

    # The poller uses the stored catalog: its recorded error is shown by GET.
    rest.echo_everything[0] = True
    poll_once(rt)
    listed = client.get("/api/v1/catalogs")
    assert listed.status_code == 200
    polls = {c["name"]: c["last_poll"] for c in listed.json()}
    assert polls["good"] and polls["good"]["error"], polls
    assert "withheld" in polls["good"]["error"]
    bodies += [listed.text, client.get("/api/v1/catalogs/good").text]
    bodies.append(client.get("/api/v1/audit", params={"limit": 500}).text)

    with transaction(rt.engine) as s:
        rows = s.execute(text("SELECT to_jsonb(a)::text FROM audit_log a")).scalars().all()
        polled = s.execute(text("SELECT error FROM catalog_polls")).scalars().all()
    failed = [r for r in rows if '"status": 422' in r]
    assert len(failed) == sum('"detail"' in b for b in bodies[1:-3]), "every refusal has its row"
    everything = "\n".join([*bodies, *rows, *(p or "" for p in polled)])
    for marker in seeded.markers:
        assert marker not in everything, f"{marker[:40]!r} leaked"


def test_a_withheld_error_still_says_what_failed(
    client: TestClient, rt: Runtime, rest: Catalogs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_SECRET_REST_URL", f"{rest.url}/echo")
    body = {"name": "c", "type": "rest", "properties": {"uri": {"env": "LW_SECRET_REST_URL"}}}
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "BadRequestError" in detail and "withheld" in detail, detail
    assert "/echo" not in detail and rest.url.split("//")[1] not in detail
    # Given by value, the same URL's error is quoted in full: nothing to keep from its sender.
    body["properties"] = {"uri": f"{rest.url}/echo"}
    assert "/echo" in client.post("/api/v1/catalogs", json=body).json()["detail"]


SECRET_KEYS = [
    "header.Authorization",
    "header.X-Api-Key",
    "header.Cookie",
    "api-key",
    "apikey",
    "pwd",
    "private_key",
    "token",
    "credential",
    "password",
    "jdbc.password",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.access-key-id",
    "gcs.oauth2.token",
    "adls.sas-token.myaccount",
    "adls.connection-string.myaccount",
    "adls.account-key",
    "client.secret-access-key",
]
# Values that read as credentials under a key that does not say so.
CREDENTIAL_VALUES = [
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg",
    "Bearer Zm9vYmFyYmF6cXV4cXV1eA",
    "r8Kd92xLq7ZmT4vNw1BpY6sJc3HgF0eA",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "AKIAIOSFODNN7EXAMPLE",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_by_value_is_refused_and_not_repeated(
    client: TestClient, rest: Catalogs, key: str
) -> None:
    value = f"by-value-{uuid.uuid4().hex[:6]}-Secret"
    for kind in ("rest", "jdbc"):
        body = {"name": "c", "type": kind, "properties": {"uri": f"{rest.url}/ok", key: value}}
        r = client.post("/api/v1/catalogs", json=body)
        assert r.status_code == 422, (kind, r.text)
        assert USE_A_REFERENCE in r.json()["detail"] and "LW_SECRET_" in r.json()["detail"]
        assert value not in r.text


@pytest.mark.parametrize("value", CREDENTIAL_VALUES)
def test_a_value_that_looks_like_a_credential_is_refused_and_not_repeated(
    client: TestClient, rest: Catalogs, value: str
) -> None:
    body = {"name": "c", "type": "rest", "properties": {"uri": f"{rest.url}/ok", "x": value}}
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 422, r.text
    assert "looks like a credential" in r.text and USE_A_REFERENCE in r.text
    assert value not in r.text and value.split()[-1] not in r.text


def test_a_secret_stored_by_value_before_the_rule_is_never_shown(
    client: TestClient, rt: Runtime
) -> None:
    """A row registered when these values were still accepted: responses mask them."""
    stored = {
        "uri": "http://127.0.0.1:1",
        "header.Authorization": "Bearer old-Secret-1",
        "apikey": "old-Secret-2",
        "x": CREDENTIAL_VALUES[0],
        "warehouse": "s3://lake/w",
        "token": {"file": "token"},
    }
    with transaction(rt.engine) as s:
        s.add(Catalog(name="old", type="rest", properties=stored, version=1, created_by="t"))
    for r in (client.get("/api/v1/catalogs/old"), client.get("/api/v1/catalogs")):
        assert r.status_code == 200
        assert "old-Secret" not in r.text and CREDENTIAL_VALUES[0] not in r.text
    shown = client.get("/api/v1/catalogs/old").json()["properties"]
    assert shown == stored | {"header.Authorization": "***", "apikey": "***", "x": "***"}


def test_ordinary_properties_are_accepted(client: TestClient, rest: Catalogs) -> None:
    body = {
        "name": "plain",
        "type": "rest",
        "properties": {
            "uri": f"{rest.url}/ok",
            "warehouse": "s3://lake-bucket/warehouse/sales_2024/orders_by_region",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
            "scope": "PRINCIPAL_ROLE:ALL",
            "s3.region": "eu-west-1",
            "prefix": "3f9a2c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b",
        },
    }
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["properties"] == body["properties"]
