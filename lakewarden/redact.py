"""Secrets out of every text lakewarden logs, stores or returns (the one place that decides).

`redact(text, secrets)` masks with `***`:

- each known secret value (`secrets`, usually `secrets_of(settings, db_url)`): database
  and catalog passwords, the alert sinks' URLs and their path and query alone (Slack's
  token is its path), secret `spark_conf` values, any setting named like a secret;
- every value this process read from a secret reference (`remember`, which
  `secret_refs.read` calls): a catalog's referenced password is masked in a job's error,
  an alert's summary and a log's traceback though no caller passes it;
- the credentials of any URL (`scheme://user:pass@host` -> `scheme://***@host`);
- the value of any `key=value` or `key: value` whose key names a secret (`password=…` in a
  DSN, `fs.s3a.secret.key=…` in a Java message, `"token": "…"` in JSON);
- what reads as a credential whatever its key: a JWT, `Bearer …`/`Basic …`, a PEM private
  key, an AWS access key id.

`is_secret_key` is the same test for a setting's name: Spark's own redaction pattern
(`spark.redaction.regex`), credential, API keys, authorization headers, cookies, private
keys, connection strings. `looks_like_credential` is the test for a value (also long
random-looking tokens, which `redact` leaves alone: hashes and ids in logs look like
them). `quotes_part_of` says whether a text quotes any piece of given values.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from lakewarden.settings import Settings

MASK = "***"
# Shorter "secrets" are not masked: they would mangle ordinary text (a password this short
# is no secret anyway).
MIN_SECRET_LEN = 4

_WORDS = (
    r"secret|passw(?:or)?d|pwd|token|access[._-]?key|account[._-]?key|credential|"
    r"api[._-]?key|private[._-]?key|authorization|cookie|connection[._-]?string"
)
_SECRET_KEY = re.compile(rf"(?i){_WORDS}")
# Credentials recognisable by their shape: a JWT (three base64url parts, the first a JSON
# header), an HTTP authorization value, a PEM private key, an AWS access key id.
_CREDENTIAL = re.compile(
    r"\beyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*"
    r"|(?i:\b(?:bearer|basic)\s+)[\w.~+/=-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[^-]*(?:-----END [A-Z ]*PRIVATE KEY-----)?"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
)
# A long run of base62/base64url characters, or of hex digits, is taken for a secret when
# its characters are spread like random ones (Shannon bits per character): 32 random
# base62 characters measure 4.0 at the least, paths and class names that long below it.
_TOKEN = re.compile(r"[A-Za-z0-9+=_-]{32,}")
_HEX = re.compile(r"\b[0-9a-fA-F]{32,}\b")
_TOKEN_BITS, _HEX_BITS = 4.0, 2.8
_HEX_DIGITS = set("0123456789abcdef-")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")
# key, separator (quotes of JSON and quoted values included), value
_KEY_VALUE = re.compile(
    rf"(?i)([\w.-]*(?:{_WORDS})[\w.-]*)([\"']?\s*[=:]\s*[\"']?)([^\s&;,'\"}}\]]+)"
)


# Values read from secret references in this process (remember): masked by every redact.
_remembered: set[str] = set()
_remembered_lock = threading.Lock()


def remember(value: str) -> None:
    """Mask `value` in everything this process redacts from now on (a secret it read)."""
    with _remembered_lock:
        _remembered.update(v for v in (value, value.strip()) if len(v) >= MIN_SECRET_LEN)


def _known(secrets: Iterable[str]) -> set[str]:
    with _remembered_lock:
        known = set(_remembered)
    return known | {s for s in secrets if len(s) >= MIN_SECRET_LEN}


def is_secret_key(key: str) -> bool:
    """Whether a setting called `key` holds a credential (password, secret, token, ...)."""
    return _SECRET_KEY.search(key) is not None


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the given secret values, URL credentials, secret `key=value`s or
    credentials recognisable by their shape."""
    for secret in sorted(_known(secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _CREDENTIAL.sub(MASK, text)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    return _KEY_VALUE.sub(lambda m: m.group(0) if m.group(3) == MASK else m[1] + m[2] + MASK, text)


def looks_like_credential(value: str) -> bool:
    """Whether `value` reads as a credential whatever it is called: a JWT, `Bearer …`, a
    private key, an access key id, a URL with a password, or a long random-looking token."""
    if _CREDENTIAL.search(value) or url_secrets(value):
        return True
    for token in _TOKEN.findall(value):
        mixed = any(c.isdigit() for c in token) and any(c.isalpha() for c in token)
        uuid_like = set(token.lower()) <= _HEX_DIGITS  # hex and hyphens: the hex rule's
        if mixed and not uuid_like and _bits(token) >= _TOKEN_BITS:
            return True
    return any(_bits(token) >= _HEX_BITS for token in _HEX.findall(value))


def _bits(token: str) -> float:
    """Shannon entropy of the token's characters, in bits per character."""
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


def quotes_part_of(text: str, values: Iterable[str]) -> bool:
    """Whether `text` holds any MIN_SECRET_LEN characters in a row of one of `values` (case
    aside, and also once percent-decoded): a message that quotes a host parsed out of a
    secret URL, or one line of a secret file, quotes a part of it if not all of it."""
    n = MIN_SECRET_LEN
    forms = (text.lower(), unquote(text).lower())
    seen = {form[i : i + n] for form in forms for i in range(len(form) - n + 1)}
    return any(
        value[i : i + n] in seen
        for value in (v.lower() for v in values if len(v) >= n)
        for i in range(len(value) - n + 1)
    )


def url_secrets(url: str | None, *, whole: bool = False) -> list[str]:
    """What of `url` is secret: its password (as written and decoded), and with `whole`
    (a webhook: whoever has it may post) the URL itself and its path and query."""
    if not url:
        return []
    parts = urlsplit(url)
    out = []
    try:
        password = parts.password
    except ValueError:
        password = None
    if password:
        out += [password, unquote(password)]
    if whole:
        rest = parts.path + (f"?{parts.query}" if parts.query else "")
        out += [url, rest] if rest.strip("/") else [url]
    return out


def secrets_of(settings: Settings, *db_urls: str | None) -> list[str]:
    """Every secret value `settings` holds, plus the passwords of `db_urls` (the database
    URL actually used, e.g. an embedded server's, which settings may not name)."""
    out: list[str] = []
    for url in db_urls:
        out += url_secrets(url)
    for name, value in settings:
        if isinstance(value, str):
            if name.startswith("alert_") and name.endswith("_url"):
                out += url_secrets(value, whole=True)
            elif name.endswith(("_url", "_uri")):
                out += url_secrets(value)
            elif is_secret_key(name):
                out.append(value)
    out += [v for k, v in settings.spark_conf.items() if is_secret_key(k)]
    return [s for s in out if len(s) >= MIN_SECRET_LEN]


class RedactingFilter(logging.Filter):
    """Masks secrets in a log record (its message and its traceback) before any handler
    writes it: put it on the handlers (a logger's filter misses its children's records)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = list(secrets)
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        return True
