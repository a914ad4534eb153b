"""OIDC bearer tokens: JWTs signed by an issuer's keys (its JWKS), their claims mapped to
grants. Optional: without `oidc_issuer` only lakewarden's own API tokens are accepted.

The signature, the algorithm, the time claims, the issuer and (when configured) the
audience are checked by PyJWT; the keys come from the issuer's JWKS through PyJWT's
`PyJWKClient`, which caches the key set (refetched after `KEYS_LIFESPAN_S`, or at once for
an unknown key id, at most once per `UNKNOWN_KID_COOLDOWN_S` so junk tokens cannot hammer
the issuer). Only asymmetric algorithms are accepted (RS256, ES256): never "none" and never
HS* (which would let anyone who knows a public key sign with it).

A token that fails is `InvalidToken` (401 in the API) with a reason that never quotes the
token. A valid token whose groups map to no grant is still a `Caller`, with no grants, so
the API answers 403 saying what is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jwt

from lakewarden.auth.grants import Caller, Grant, InvalidGrant
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256")
LEEWAY_S = 30  # clock skew allowed on exp, nbf and iat
KEYS_LIFESPAN_S = 300  # the JWKS is fetched again after this long
UNKNOWN_KID_COOLDOWN_S = 30  # an unknown kid refetches the JWKS at most this often
FETCH_TIMEOUT_S = 5  # a stuck issuer holds a request at most this long
_SHOWN = 80  # at most this much of a header or claim value goes into an error


class InvalidToken(ValueError):
    """The bearer token is not accepted; the message says why (never quoting the token)."""


class IssuerUnavailable(InvalidToken):
    """The issuer's keys could not be fetched: not the token's fault (a 503 would fit too)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _claim(payload: Mapping[str, Any], name: str) -> Any:
    """The claim `name`, or a dotted path into nested claims (Keycloak's
    `realm_access.roles`) when there is no claim of that exact name. None if absent."""
    if name in payload:
        return payload[name]
    value: Any = payload
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _values(claim: Any) -> list[str]:
    """A groups claim's values: a list of strings, or one space-separated string."""
    if isinstance(claim, str):
        return claim.split()
    if isinstance(claim, list | tuple):
        return [v for v in claim if isinstance(v, str) and v]
    return []


class OIDCVerifier:
    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str,
        audience: str | None,
        subject_claim: str,
        groups_claim: str,
        grants: Mapping[str, tuple[Grant, ...]],
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.audience = audience
        self.subject_claim = subject_claim
        self.groups_claim = groups_claim
        self.grants = dict(grants)
        self._keys = jwt.PyJWKClient(
            jwks_url,
            cache_jwk_set=True,
            lifespan=KEYS_LIFESPAN_S,
            timeout=FETCH_TIMEOUT_S,
            cooldown_duration=UNKNOWN_KID_COOLDOWN_S,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OIDCVerifier | None:
        """The verifier the settings describe, or None when no issuer is configured. A
        grant in `oidc_grants` that does not parse is InvalidGrant (the service does not
        start on a mapping it cannot honour)."""
        if not settings.oidc_issuer:
            return None
        issuer = settings.oidc_issuer
        grants: dict[str, tuple[Grant, ...]] = {}
        for value, texts in settings.oidc_grants.items():
            try:
                grants[value] = tuple(Grant.parse(t) for t in texts)
            except InvalidGrant as e:
                raise InvalidGrant(f"LAKEWARDEN_OIDC_GRANTS[{value!r}]: {e}") from None
        if not settings.oidc_audience:
            log.warning(
                "OIDC: no audience configured (LAKEWARDEN_OIDC_AUDIENCE): any token %s "
                "issues, for any application, is accepted",
                issuer,
            )
        return cls(
            issuer=issuer,
            jwks_url=settings.oidc_jwks_url or issuer.rstrip("/") + "/.well-known/jwks.json",
            audience=settings.oidc_audience or None,
            subject_claim=settings.oidc_subject_claim,
            groups_claim=settings.oidc_groups_claim,
            grants=grants,
        )

    def claims(self, token: str) -> dict[str, Any]:
        """The token's verified claims, or InvalidToken saying why not."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the bearer token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise InvalidToken(
                f"the token's algorithm {_short(alg)} is not accepted: one of "
                f"{', '.join(ALGORITHMS)}"
            )
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("the token's header names no key (kid)")
        try:
            key = self._keys.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError:
            log.warning("OIDC: could not fetch the issuer's keys from %s", self.jwks_url)
            raise IssuerUnavailable(
                f"the issuer's keys could not be fetched from {self.jwks_url}; try again later"
            ) from None
        except jwt.PyJWTError:
            raise InvalidToken(
                f"the token's key {_short(kid)} is not among the issuer's keys ({self.jwks_url})"
            ) from None
        try:
            return jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                issuer=self.issuer,
                audience=self.audience,
                leeway=LEEWAY_S,
                options={
                    "require": ["exp", "iss"],
                    "verify_aud": self.audience is not None,
                },
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("the token is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(f"the token was not issued by {self.issuer}") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(f"the token is not meant for audience {self.audience!r}") from None
        except jwt.MissingRequiredClaimError as e:
            raise InvalidToken(f"the token has no {e.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken(
                "the token's signature does not verify with the issuer's key"
            ) from None
        except jwt.InvalidAlgorithmError:
            raise InvalidToken(
                f"the token's algorithm does not match its key {_short(kid)}"
            ) from None
        except jwt.PyJWTError as e:  # malformed claims and the like; the class names it
            raise InvalidToken(f"the token is not valid ({type(e).__name__})") from None

    def caller(self, token: str) -> Caller:
        """The caller a valid token stands for: `oidc:<subject>` with the union of the
        grants its groups map to (none, if they map to none). InvalidToken otherwise."""
        claims = self.claims(token)
        subject = claims.get(self.subject_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise InvalidToken(f"the token has no {self.subject_claim!r} claim naming its subject")
        groups = _values(_claim(claims, self.groups_claim))
        grants: list[Grant] = []
        for group in groups:
            for grant in self.grants.get(group, ()):
                if grant not in grants:
                    grants.append(grant)
        return Caller(
            subject=f"oidc:{subject.strip()}"[:255],  # the audit's actor column
            grants=tuple(grants),
            via="oidc",
            extra={
                "issuer": self.issuer,
                "groups": groups,
                "mapped_groups": sorted(self.grants),
            },
        )
