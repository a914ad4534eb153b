"""Secrets out of every text lakewarden logs, stores or returns (the one place that decides).

`redact(text, secrets)` masks with `***`:

- each known secret value (`secrets`, usually `secrets_of(settings, db_url)`): database
  and catalog passwords, the alert sinks' URLs and their path and query alone (Slack's
  token is its path), secret `spark_conf` values, any setting named like a secret;
- the credentials of any URL (`scheme://user:pass@host` -> `scheme://***@host`);
- the value of any `key=value` or `key: value` whose key names a secret (`password=…` in a
  DSN, `fs.s3a.secret.key=…` in a Java message, `"token": "…"` in JSON).

`is_secret_key` is the same test for a setting's name: Spark's own redaction pattern
(`spark.redaction.regex`) and credential.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from lakewarden.settings import Settings

MASK = "***"
# Shorter "secrets" are not masked: they would mangle ordinary text (a password this short
# is no secret anyway).
MIN_SECRET_LEN = 4

_WORDS = r"secret|passw(?:or)?d|token|access[._-]?key|account[._-]?key|credential"
_SECRET_KEY = re.compile(rf"(?i){_WORDS}")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")
# key, separator (quotes of JSON and quoted values included), value
_KEY_VALUE = re.compile(
    rf"(?i)([\w.-]*(?:{_WORDS})[\w.-]*)([\"']?\s*[=:]\s*[\"']?)([^\s&;,'\"}}\]]+)"
)


def is_secret_key(key: str) -> bool:
    """Whether a setting called `key` holds a credential (password, secret, token, ...)."""
    return _SECRET_KEY.search(key) is not None


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the given secret values, URL credentials or secret `key=value`s."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    return _KEY_VALUE.sub(lambda m: m.group(0) if m.group(3) == MASK else m[1] + m[2] + MASK, text)


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
