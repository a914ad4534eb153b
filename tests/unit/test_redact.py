"""`lakewarden.redact`: what counts as a secret, and how it is masked in text and logs; the
alert sinks' errors name the sink, not its URL; Spark credentials are no launch settings."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx

from lakewarden.alerts.sinks import delivery_error
from lakewarden.redact import (
    RedactingFilter,
    is_secret_key,
    looks_like_credential,
    quotes_part_of,
    redact,
    secrets_of,
)
from lakewarden.settings import Settings
from lakewarden.spark.session import session_secrets, spark_conf

SLACK = "https://hooks.slack.example/services/T000/B000/SEEKRIT-xyz"


def _settings(tmp_path: Path) -> Settings:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    return Settings(
        data_dir=tmp_path,
        spark_jars=str(jar),
        database_url="postgresql://lw:Pa%2Fss-word@127.0.0.1:5432/lw",
        catalog_database_url="postgresql://cat:CATALOG-pw@127.0.0.1:5432/cat",
        alert_slack_url=SLACK,
        alert_webhook_url="https://hooks.example/x?token=QUERY-tok",
        alert_alertmanager_url="http://am:9093",
        spark_conf={
            "spark.hadoop.fs.s3a.secret.key": "S3-secret",
            "spark.hadoop.fs.s3a.access.key": "S3-access",
            "spark.executor.cores": "2",
        },
    )


def test_secrets_of_names_every_secret_setting(tmp_path: Path) -> None:
    found = set(secrets_of(_settings(tmp_path), "postgresql://x:EMBEDDED-pw@h/db"))
    assert {
        "Pa%2Fss-word",
        "Pa/ss-word",  # as written in the URL and decoded
        "CATALOG-pw",
        "EMBEDDED-pw",
        SLACK,
        "/services/T000/B000/SEEKRIT-xyz",  # Slack's token is the path
        "/x?token=QUERY-tok",
        "S3-secret",
        "S3-access",
    } <= found
    assert "2" not in found and "http://am:9093" in found  # every sink URL, whole


def test_redact_masks_known_values_url_credentials_and_secret_key_values(
    tmp_path: Path,
) -> None:
    secrets = secrets_of(_settings(tmp_path))
    cases = {
        f"Server error '500' for url '{SLACK}'": "Server error '500' for url '***'",
        "POST /services/T000/B000/SEEKRIT-xyz failed": "POST *** failed",
        "at postgresql://u:other@h/db": "at postgresql://***@h/db",
        "fs.s3a.secret.key=abc, x=1": "fs.s3a.secret.key=***, x=1",
        'host=h password=hunter22 {"token": "t0k"}': 'host=h password=*** {"token": "***"}',
        "spark.hadoop.fs.s3a.access.key=S3-access": "spark.hadoop.fs.s3a.access.key=***",
        "task 4: succeeded; 303 files >= 300": "task 4: succeeded; 303 files >= 300",
    }
    for raw, clean in cases.items():
        assert redact(raw, secrets) == clean, raw
    assert redact(redact("s3://a:b@bucket/x")) == "s3://***@bucket/x"  # idempotent


def test_is_secret_key() -> None:
    for key in (
        "spark.hadoop.fs.s3a.secret.key",
        "fs.s3a.access.key",
        "jdbc.password",
        "s3.secret-access-key",
        "api_token",
        "aws.credentials.provider",
        "fs.azure.account.key.acct.dfs.core.windows.net",
        "header.Authorization",
        "header.Proxy-Authorization",
        "header.Cookie",
        "api-key",
        "apikey",
        "X-Api-Key",
        "pwd",
        "private_key",
        "adls.connection-string.acct",
    ):
        assert is_secret_key(key), key
    for key in (
        "spark.executor.cores",
        "spark.sql.catalog.lake.uri",
        "spark.jars",
        "oauth2-server-uri",
        "header.X-Iceberg-Access-Delegation",
    ):
        assert not is_secret_key(key), key


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"


def test_redact_masks_what_reads_as_a_credential_whatever_its_key() -> None:
    cases = {
        f"401 for token {JWT} (expired)": "401 for token *** (expired)",
        "sent Bearer abcdefgh12345678 to h": "sent *** to h",
        "basic dXNlcjpwYXNzd29yZA== refused": "*** refused",
        "key AKIAIOSFODNN7EXAMPLE unknown": "key *** unknown",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----": "***",
        "snapshot 5937117119577207079 of uuid 3f9a2c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b": (
            "snapshot 5937117119577207079 of uuid 3f9a2c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b"
        ),
    }
    for raw, clean in cases.items():
        assert redact(raw) == clean, raw


def test_looks_like_credential() -> None:
    for value in (
        JWT,
        "Bearer Zm9vYmFyYmF6cXV4cXV1eA",
        "r8Kd92xLq7ZmT4vNw1BpY6sJc3HgF0eA",  # 32 random base62
        "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # 64 hex
        "postgresql://u:pw@h/db",
    ):
        assert looks_like_credential(value), value
    for value in (
        "https://rest.example.com/api/catalog",
        "s3://lake-bucket/warehouse/sales_2024/orders_by_region_and_customer_segment",
        "pyiceberg.io.pyarrow.PyArrowFileIO",
        "3f9a2c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b",  # a warehouse id
        "ffffffff-ffff-ffff-ffff-fffffffffffe",
        "PRINCIPAL_ROLE:ALL",
        "vended-credentials",
        "abfss://container@account.dfs.core.windows.net/warehouse/path",
        "org.apache.iceberg.aws.s3.S3FileIO",
    ):
        assert not looks_like_credential(value), value


def test_quotes_part_of() -> None:
    values = ["http://Secret-Host.internal:8181/api", "tok"]
    assert quotes_part_of("connect to secret-host failed", values)  # host, lower-cased
    assert quotes_part_of("GET /x?u=http%3A%2F%2FSecret", values)  # once percent-decoded
    assert quotes_part_of("port 8181 refused", values)
    assert not quotes_part_of("connection refused", values)
    assert not quotes_part_of("a tok b", values)  # shorter than MIN_SECRET_LEN: no secret


def test_delivery_errors_name_the_sink_never_the_url() -> None:
    request = httpx.Request("POST", SLACK)
    status = httpx.HTTPStatusError(
        "Server error for url " + SLACK, request=request, response=httpx.Response(500)
    )
    assert delivery_error("slack", status) == "slack: HTTP 500"
    refused = httpx.ConnectError("[Errno 111] Connection refused", request=request)
    assert (
        delivery_error("webhook", refused)
        == "webhook: ConnectError: [Errno 111] Connection refused"
    )
    assert delivery_error("slack", httpx.InvalidURL(f"Invalid URL {SLACK}")) == "slack: InvalidURL"


def test_redacting_filter_masks_messages_and_tracebacks() -> None:
    record_of: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            record_of.append(record)

    handler = Keep()
    handler.addFilter(RedactingFilter([SLACK]))
    log = logging.getLogger("test_redact_filter")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("posting to %s", SLACK)
        try:
            raise RuntimeError(f"cannot post to {SLACK} password=hunter22")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = "\n".join(handler.format(r) + (r.exc_text or "") for r in record_of)
    assert "posting to ***" in text and "RuntimeError: cannot post to *** password=***" in text
    assert "SEEKRIT" not in text and "hunter22" not in text


def test_spark_credentials_are_set_after_launch_not_on_the_command_line(tmp_path: Path) -> None:
    """Every launch setting is on spark-submit's command line: an s3a key, or any setting
    named like a credential, is set on the running session instead (`set_secrets`)."""
    s = _settings(tmp_path)
    url = s.database_url or ""
    launch, secrets = spark_conf(s, url), session_secrets(s, url)
    assert secrets == {
        "spark.sql.catalog.lake.jdbc.password": "CATALOG-pw",
        "spark.hadoop.fs.s3a.secret.key": "S3-secret",
        "spark.hadoop.fs.s3a.access.key": "S3-access",
    }
    assert not set(launch) & set(secrets)
    assert launch["spark.executor.cores"] == "2"
    assert not any(v in secrets.values() for v in launch.values())
