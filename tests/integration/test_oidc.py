"""OIDC bearer tokens against a real JWKS endpoint: key pairs generated here, the issuer's
JWKS served over HTTP on 127.0.0.1 from this process, tokens signed with PyJWT. A token is
accepted only when its signature, algorithm, issuer, audience and times all hold; its
groups map to grants; a refusal says why and never quotes the token."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient
from helpers import serve_http

from lakewarden.auth.grants import Grant, InvalidGrant, Role
from lakewarden.auth.oidc import LEEWAY_S, InvalidToken, IssuerUnavailable, OIDCVerifier
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from services.api.app import create_app

AUDIENCE = "lakewarden-api"
GRANTS = {
    "lake-admins": ["admin"],
    "sales-oncall": ["operator@lake/sales*", "viewer"],
    "viewers": ["viewer"],
}

RSAKey = rsa.RSAPrivateKey
ECKey = ec.EllipticCurvePrivateKey


def public_jwk(key: RSAKey | ECKey, kid: str, alg: str) -> dict[str, Any]:
    algorithm: Any = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class JWKSServer:
    """The issuer's JWKS at http://127.0.0.1:<port>/.well-known/jwks.json (the issuer is the
    base URL, so the default JWKS URL is used). `keys` may be changed (rotation); `fetches`
    counts the requests; `up` False answers 503."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.fetches = 0
        self.up = True
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                if not server.up or self.path != "/.well-known/jwks.json":
                    self.send_response(503 if not server.up else 404)
                    self.end_headers()
                    return
                body = json.dumps({"keys": server.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def rsa_key() -> RSAKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ECKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def issuer(rsa_key: RSAKey, ec_key: ECKey) -> Iterator[JWKSServer]:
    keys = [public_jwk(rsa_key, "rsa-1", "RS256"), public_jwk(ec_key, "ec-1", "ES256")]
    server = JWKSServer(keys)
    yield server
    server.close()


def settings_for(issuer: JWKSServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "oidc_issuer": issuer.url,
        "oidc_audience": AUDIENCE,
        "oidc_grants": GRANTS,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture
def verifier(issuer: JWKSServer) -> OIDCVerifier:
    v = OIDCVerifier.from_settings(settings_for(issuer))
    assert v is not None
    return v


Sign = Callable[..., str]


@pytest.fixture
def sign(issuer: JWKSServer, rsa_key: RSAKey) -> Sign:
    """A token with good claims by default; keyword arguments override claims (None drops
    one), `key`/`kid`/`alg` change how it is signed."""

    def make(
        *, key: Any = rsa_key, kid: str | None = "rsa-1", alg: str = "RS256", **claims: Any
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": issuer.url,
            "aud": AUDIENCE,
            "sub": "alice",
            "groups": ["sales-oncall"],
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        payload = {k: v for k, v in payload.items() if v is not None}
        headers = {"kid": kid} if kid is not None else {}
        return jwt.encode(payload, key, algorithm=alg, headers=headers)

    return make


def refused(verifier: OIDCVerifier, token: str, reason: str) -> InvalidToken:
    """The token is refused with `reason` in the message, and the message holds no part of
    the token (not its signature, not its payload)."""
    with pytest.raises(InvalidToken) as e:
        verifier.caller(token)
    message = str(e.value)
    assert reason in message, message
    for part in token.split("."):
        if len(part) >= 8:
            assert part not in message, message
    # Nor does a chained library error travel with it (into a log's traceback).
    assert e.value.__cause__ is None
    assert e.value.__context__ is None or e.value.__suppress_context__
    return e.value


def hs256_with_public_key(issuer: JWKSServer, rsa_key: RSAKey, kid: str) -> str:
    """The key-confusion attack: HS256 keyed with the issuer's public key (PyJWT refuses to
    make one, so it is made by hand)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    secret = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    payload = b64(
        json.dumps(
            {
                "iss": issuer.url,
                "aud": AUDIENCE,
                "sub": "mallory",
                "groups": ["lake-admins"],
                "iat": now,
                "exp": now + 300,
            }
        ).encode()
    )
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


# --- accepted ------------------------------------------------------------------------------


def test_a_good_token_is_a_caller_with_its_groups_grants(
    verifier: OIDCVerifier, sign: Sign
) -> None:
    caller = verifier.caller(sign(groups=["sales-oncall", "viewers", "unmapped"]))
    assert caller.subject == "oidc:alice"
    assert caller.via == "oidc"
    assert caller.token_id is None
    # The union, each grant once, in the order the groups name them.
    assert caller.grants == (Grant(Role.operator, "lake", "sales*"), Grant(Role.viewer))
    assert caller.may(Role.operator, "lake", "sales_eu")
    assert not caller.may(Role.operator, "lake", "finance")
    assert caller.may(Role.viewer, "lake", "finance")


def test_groups_as_a_space_separated_string_and_es256(
    verifier: OIDCVerifier, sign: Sign, ec_key: ECKey
) -> None:
    token = sign(key=ec_key, kid="ec-1", alg="ES256", groups="viewers lake-admins")
    caller = verifier.caller(token)
    assert caller.grants == (Grant(Role.viewer), Grant(Role.admin))


def test_no_groups_is_a_caller_with_no_grants(verifier: OIDCVerifier, sign: Sign) -> None:
    for token in (sign(groups=None), sign(groups=[]), sign(groups=["unmapped"])):
        caller = verifier.caller(token)
        assert caller.subject == "oidc:alice"
        assert caller.grants == ()
        assert caller.grants_text() == "no grants"
        assert not caller.may_somewhere(Role.viewer)


def test_configured_claims_and_a_nested_groups_claim(issuer: JWKSServer, sign: Sign) -> None:
    v = OIDCVerifier.from_settings(
        settings_for(issuer, oidc_subject_claim="email", oidc_groups_claim="realm_access.roles")
    )
    assert v is not None
    caller = v.caller(sign(email="alice@example.com", realm_access={"roles": ["lake-admins"]}))
    assert caller.subject == "oidc:alice@example.com"
    assert caller.grants == (Grant(Role.admin),)


def test_clock_skew_within_the_leeway_is_accepted(verifier: OIDCVerifier, sign: Sign) -> None:
    now = int(time.time())
    verifier.caller(sign(exp=now - LEEWAY_S // 2, iat=now - 600))
    verifier.caller(sign(nbf=now + LEEWAY_S // 2, iat=now + LEEWAY_S // 2))


def test_no_audience_configured_accepts_any_audience(issuer: JWKSServer, sign: Sign) -> None:
    v = OIDCVerifier.from_settings(settings_for(issuer, oidc_audience=None))
    assert v is not None
    assert v.caller(sign(aud="another-app")).subject == "oidc:alice"
    assert v.caller(sign(aud=None)).subject == "oidc:alice"


# --- refused -------------------------------------------------------------------------------


def test_wrong_issuer_audience_or_time_is_refused(verifier: OIDCVerifier, sign: Sign) -> None:
    now = int(time.time())
    refused(verifier, sign(iss="https://evil.example"), "not issued by")
    refused(verifier, sign(iss=None), "no 'iss' claim")
    refused(verifier, sign(aud="another-app"), "not meant for audience 'lakewarden-api'")
    refused(verifier, sign(aud=None), "no 'aud' claim")
    refused(verifier, sign(exp=now - LEEWAY_S - 5), "has expired")
    refused(verifier, sign(exp=None), "no 'exp' claim")
    refused(verifier, sign(nbf=now + LEEWAY_S + 60), "not valid yet")
    refused(verifier, sign(sub=None), "no 'sub' claim")
    refused(verifier, sign(sub=""), "no 'sub' claim")


def test_a_token_signed_by_another_key_is_refused(verifier: OIDCVerifier, sign: Sign) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    # Claiming the issuer's key id: the signature does not verify.
    refused(verifier, sign(key=other), "signature does not verify")
    # With a key id of its own: no such key at the issuer.
    refused(verifier, sign(key=other, kid="rsa-evil"), "not among the issuer's keys")
    refused(verifier, sign(key=other, kid=None), "names no key (kid)")


def test_alg_none_and_hmac_are_refused(
    verifier: OIDCVerifier, sign: Sign, issuer: JWKSServer, rsa_key: RSAKey, ec_key: ECKey
) -> None:
    refused(verifier, sign(key=None, alg="none"), "algorithm 'none' is not accepted")
    secret = "a shared secret, 32 bytes or more"
    refused(verifier, sign(key=secret, alg="HS256"), "'HS256' is not accepted")
    refused(verifier, hs256_with_public_key(issuer, rsa_key, "rsa-1"), "'HS256' is not accepted")
    # An allowed algorithm that is not the key's: ES256 named on the RSA key's id.
    refused(verifier, sign(key=ec_key, kid="rsa-1", alg="ES256"), "does not match its key")


def test_garbage_is_refused_without_echoing_it(verifier: OIDCVerifier) -> None:
    refused(verifier, "not-a-jwt-at-all-but-long", "not a well-formed JWT")
    refused(verifier, "eyJhbGciOiJSUzI1NiJ9.garbage-payload.garbage-signature", "not a well")


def test_a_tampered_payload_is_refused(verifier: OIDCVerifier, sign: Sign) -> None:
    header, _, signature = sign().split(".")
    _, payload, _ = sign(groups=["lake-admins"]).split(".")
    refused(verifier, f"{header}.{payload}.{signature}", "signature does not verify")


# --- keys ----------------------------------------------------------------------------------


def test_the_key_set_is_cached_and_refetched_for_a_rotated_key(
    issuer: JWKSServer, verifier: OIDCVerifier, sign: Sign, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(5):
        verifier.caller(sign())
    assert issuer.fetches == 1
    # The issuer rotates in a new key: the first token naming it refetches the set (once the
    # cooldown allows; here it is lifted so the test need not wait).
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.keys = [*issuer.keys, public_jwk(new, "rsa-2", "RS256")]
    monkeypatch.setattr(verifier._keys, "cooldown_duration", 0)
    assert verifier.caller(sign(key=new, kid="rsa-2")).subject == "oidc:alice"
    assert issuer.fetches == 2


def test_unknown_key_ids_do_not_hammer_the_issuer(
    issuer: JWKSServer, verifier: OIDCVerifier, sign: Sign
) -> None:
    verifier.caller(sign())
    for i in range(10):
        refused(verifier, sign(kid=f"made-up-{i}"), "not among the issuer's keys")
    assert issuer.fetches == 1  # an unknown kid refetches at most once per cooldown (30 s)


def test_an_issuer_that_is_down_is_issuer_unavailable(
    issuer: JWKSServer, verifier: OIDCVerifier, sign: Sign
) -> None:
    issuer.up = False
    e = refused(verifier, sign(), "could not be fetched")
    assert isinstance(e, IssuerUnavailable)
    issuer.up = True
    assert verifier.caller(sign()).subject == "oidc:alice"


# --- settings ------------------------------------------------------------------------------


def test_from_settings(issuer: JWKSServer) -> None:
    assert OIDCVerifier.from_settings(Settings(oidc_issuer=None)) is None
    v = OIDCVerifier.from_settings(Settings(oidc_issuer="https://id.example/realms/x/"))
    assert v is not None
    assert v.jwks_url == "https://id.example/realms/x/.well-known/jwks.json"
    assert v.audience is None
    v = OIDCVerifier.from_settings(
        Settings(oidc_issuer="https://id.example", oidc_jwks_url="https://id.example/certs")
    )
    assert v is not None and v.jwks_url == "https://id.example/certs"
    with pytest.raises(InvalidGrant, match="OIDC_GRANTS\\['ops'\\]: unknown role 'root'"):
        OIDCVerifier.from_settings(settings_for(issuer, oidc_grants={"ops": ["root"]}))


# --- through the API -----------------------------------------------------------------------


@pytest.fixture
def client(rt: Runtime, issuer: JWKSServer) -> Iterator[TestClient]:
    settings = rt.settings.model_copy(
        update={"oidc_issuer": issuer.url, "oidc_audience": AUDIENCE, "oidc_grants": GRANTS}
    )
    app = create_app(dataclasses.replace(rt, settings=settings), background=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_takes_a_valid_jwt_and_refuses_an_invalid_one(
    client: TestClient, rt: Runtime, sign: Sign
) -> None:
    with transaction(rt.engine) as session:
        for namespace in ("sales", "finance"):
            session.add(ManagedTable(catalog="lake", namespace=namespace, name="orders", policy={}))

    # Its groups' grants decide what it sees: operator@lake/sales* and viewer -> both.
    r = client.get("/api/v1/tables", headers=bearer(sign()))
    assert r.status_code == 200, r.text
    assert sorted(t["namespace"] for t in r.json()["items"]) == ["finance", "sales"]

    expired = sign(exp=int(time.time()) - 3600)
    r = client.get("/api/v1/tables", headers=bearer(expired))
    assert r.status_code == 401
    assert "expired" in r.json()["detail"]
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert expired.split(".")[1] not in r.text and expired.split(".")[2] not in r.text

    forged = sign(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))
    for token in (forged, sign(alg="none", key=None), sign(aud="another-app"), "not-a-jwt"):
        r = client.get("/api/v1/tables", headers=bearer(token))
        assert r.status_code == 401, (token, r.text)

    # Valid, but its groups map to no grant: 403 saying who it is and what is missing.
    r = client.get("/api/v1/tables", headers=bearer(sign(groups=["unmapped"])))
    assert r.status_code == 403, r.text
    assert "oidc:alice" in r.json()["detail"]
