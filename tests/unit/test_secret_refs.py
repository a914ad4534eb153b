"""`lakewarden.secret_refs`: what a catalog's secret reference may name (files in the
secrets directory, `LW_SECRET_*` variables), and pyiceberg's secret properties all refused
by value (`catalogs.registry.is_secret_property`)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from pyiceberg import io as pyiceberg_io
from pyiceberg.catalog import rest, sql

from lakewarden.catalogs.registry import is_secret_property
from lakewarden.isolation import error_line
from lakewarden.redact import MASK, RedactingFilter
from lakewarden.secret_refs import MAX_FILE_BYTES, RefRefused, RefRules, check, read
from lakewarden.settings import Settings


@pytest.fixture
def rules(tmp_path: Path) -> RefRules:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token").write_text("s3cret\n")
    (secrets / "sub").mkdir()
    (secrets / "sub" / "key").write_text("k3y")
    (tmp_path / "outside").write_text("nope")
    return RefRules(secrets, "LW_SECRET_")


def test_the_default_secrets_directory_is_in_the_data_directory(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).secrets_path == tmp_path / "secrets"
    assert Settings(data_dir=tmp_path, secrets_dir=Path("/run/s")).secrets_path == Path("/run/s")


def test_files_in_the_secrets_directory_are_read(rules: RefRules) -> None:
    assert read("token", {"file": "token"}, rules) == "s3cret"  # one newline stripped
    assert read("token", {"file": str(rules.secrets_dir / "token")}, rules) == "s3cret"
    assert read("token", {"file": "sub/../sub/key"}, rules) == "k3y"
    # A Kubernetes secret volume: the file is a link to ..data/<file>, inside.
    (rules.secrets_dir / "..data").symlink_to(rules.secrets_dir / "sub")
    (rules.secrets_dir / "mounted").symlink_to("..data/key")
    assert read("token", {"file": "mounted"}, rules) == "k3y"


@pytest.mark.parametrize(
    "file",
    ["/etc/passwd", "/proc/self/environ", "../outside", "sub/../../outside", ".", "", "/"],
)
def test_files_outside_are_refused_before_anything_is_read(rules: RefRules, file: str) -> None:
    with pytest.raises(RefRefused, match="not inside the secrets directory"):
        check("uri", {"file": file}, rules)
    with pytest.raises(RefRefused, match="not inside the secrets directory"):
        read("uri", {"file": file}, rules)


def test_a_link_out_of_the_directory_is_refused(rules: RefRules, tmp_path: Path) -> None:
    (rules.secrets_dir / "escape").symlink_to(tmp_path / "outside")
    (rules.secrets_dir / "proc").symlink_to("/proc/self/environ")
    for name in ("escape", "proc"):
        with pytest.raises(RefRefused, match="not inside the secrets directory"):
            read("uri", {"file": name}, rules)


def test_what_is_no_secret_file_is_refused_without_its_content(rules: RefRules) -> None:
    os.mkfifo(rules.secrets_dir / "fifo")
    with pytest.raises(RefRefused, match="not a regular file"):
        read("uri", {"file": "fifo"}, rules)  # and returns at once: O_NONBLOCK
    with pytest.raises(RefRefused, match="not a regular file"):
        read("uri", {"file": "sub"}, rules)
    (rules.secrets_dir / "big").write_text("x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(RefRefused, match="larger than 64 KiB"):
        read("uri", {"file": "big"}, rules)
    (rules.secrets_dir / "binary").write_bytes(b"\xff\xfe")
    with pytest.raises(RefRefused, match="not UTF-8"):
        read("uri", {"file": "binary"}, rules)
    with pytest.raises(RefRefused, match=r"cannot be read \(No such file or directory\)"):
        read("uri", {"file": "missing"}, rules)


def test_variables_need_the_prefix_and_never_name_a_setting(
    rules: RefRules, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_SECRET_SALES_URL", "postgresql://x")
    assert read("uri", {"env": "LW_SECRET_SALES_URL"}, rules) == "postgresql://x"
    for name in ("LAKEWARDEN_DATABASE_URL", "lakewarden_database_url", "HOME", "lw_secret_x"):
        monkeypatch.setenv(name, "value")
        with pytest.raises(RefRefused, match="starts with 'LW_SECRET_'") as refused:
            read("uri", {"env": name}, rules)
        assert "value" not in str(refused.value)
    # Even a prefix that would take them in: lakewarden's settings stay out.
    with pytest.raises(RefRefused, match="never a LAKEWARDEN_\\* setting"):
        check("uri", {"env": "LAKEWARDEN_DATABASE_URL"}, RefRules(rules.secrets_dir, ""))
    with pytest.raises(RefRefused, match="not set in this process"):
        read("uri", {"env": "LW_SECRET_NOT_SET"}, rules)


NOT_SECRETS = ("EXPIRES", "ENDPOINT", "URI")  # a token's expiry, where to get one


def _secret_constants(*modules: object) -> set[str]:
    """pyiceberg's property names whose constant says they hold a credential."""
    words = ("SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "ACCESS_KEY", "ACCOUNT_KEY")
    found = set()
    for module in modules:
        for name, value in vars(module).items():
            named = name.isupper() and any(w in name for w in words)
            if named and isinstance(value, str) and not any(n in name for n in NOT_SECRETS):
                found.add(value)
    return found


def test_every_pyiceberg_secret_property_is_refused_by_value() -> None:
    found = _secret_constants(pyiceberg_io, rest, sql)
    assert {"s3.secret-access-key", "token", "credential", "adls.sas-token"} <= found
    for kind in ("rest", "jdbc"):
        missed = sorted(p for p in found if not is_secret_property(kind, p))
        assert not missed, (kind, missed)
    for key in ("uri", "warehouse", "prefix", "s3.endpoint", "header.X-Iceberg-Access-Delegation"):
        assert not is_secret_property("rest", key), key


def test_a_value_read_from_a_reference_is_masked_wherever_the_process_redacts(
    rules: RefRules, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog's referenced password in a job's error line or a logged traceback: no
    caller passes it to redact, which knows it because this process read it."""
    (rules.secrets_dir / "rest-token").write_text("ref-file-value-9c1d\n")
    monkeypatch.setenv("LW_SECRET_REST_TOKEN", "ref-env-value-77aa")
    read("token", {"file": "rest-token"}, rules)
    read("token", {"env": "LW_SECRET_REST_TOKEN"}, rules)
    err = RuntimeError("server said: unknown credential ref-file-value-9c1d / ref-env-value-77aa")
    line = error_line(err)
    assert "ref-file-value-9c1d" not in line and "ref-env-value-77aa" not in line
    assert line.count(MASK) == 2

    record = logging.LogRecord("t", logging.ERROR, __file__, 1, "poll failed", None, None)
    try:
        raise err
    except RuntimeError:
        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    assert record.exc_text and "ref-file-value-9c1d" not in record.exc_text
    assert "ref-env-value-77aa" not in record.exc_text
