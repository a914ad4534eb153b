"""Tables on an object store (S3 and what speaks its API): what each side needs beyond the
catalog's properties, and the check that the warehouse answers.

One set of catalog properties serves both sides. pyiceberg reads `s3://` through pyarrow's
S3 file system (`s3.endpoint`, `s3.access-key-id`, `s3.secret-access-key`, `s3.region`,
path-style addressing unless `s3.force-virtual-addressing`); Iceberg-Java (Spark's jobs)
shares the `s3.*` names but needs three more, which `spark_properties` derives so that
nobody has to give them twice: `io-impl` (S3FileIO: Hadoop has no `s3://` file system
here), `client.region` (Java's name for the region) and `s3.path-style-access` (pyarrow's
addressing). Credentials stay references (`secret_refs`) in the stored properties; both
sides read them when they load the catalog.

Hudi's and Delta's Python readers (hudi-rs, delta-rs) are Rust's `object_store` underneath:
`reader_options` gives them the same properties under its names (`aws_*`), and
`filesystem` pyarrow's S3 file system for listing their logs, so a `hudi` or `delta`
catalog (or a `hive` one's Hudi and Delta tables) on S3 takes the same `s3.*` properties.

Spark's Hudi jobs read and write through Hadoop's S3A file system (`hadoop_s3a`: the same
properties as per-bucket `fs.s3a.bucket.<b>.*` settings).

A Hadoop file system (`HadoopFileIO`) serves every other scheme; `by_prefix` says where a
listing must go through the table's FileIO instead (Iceberg's prefix listing).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from urllib.parse import urlsplit

from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO

from lakewarden.hdfs import client_config, on_hdfs

S3_SCHEMES = ("s3", "s3a", "s3n")  # the schemes Iceberg's S3FileIO and pyiceberg serve
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# A registration waits at most this long for the endpoint (the API's own check has 10 s).
PROBE_CONNECT_TIMEOUT_S = 3.0
PROBE_REQUEST_TIMEOUT_S = 5.0


class WarehouseUnreachable(RuntimeError):
    """The warehouse's storage did not answer, or refused: the message says which endpoint
    and bucket, and what to check; it never quotes a credential."""


def scheme(location: str) -> str:
    return urlsplit(location).scheme.lower()


def on_s3(location: str) -> bool:
    return scheme(location) in S3_SCHEMES


def by_prefix(location: str) -> bool:
    """Whether files under `location` are listed through the table's FileIO (Iceberg's
    prefix listing) rather than a Hadoop file system, which has none for `s3://` here."""
    return on_s3(location)


def spark_properties(props: dict[str, str]) -> dict[str, str]:
    """What Iceberg-Java needs beside pyiceberg's properties of a catalog whose warehouse
    is on S3 (nothing for another); a property given explicitly wins."""
    if not on_s3(props.get("warehouse", "")) and "s3.endpoint" not in props:
        return {}
    extra = {"io-impl": S3_FILE_IO}
    if "s3.region" in props:
        extra["client.region"] = props["s3.region"]
    if "s3.endpoint" in props:
        # pyarrow addresses a bucket by path unless told otherwise: so does Spark.
        virtual = props.get("s3.force-virtual-addressing", "false").lower() == "true"
        extra["s3.path-style-access"] = "false" if virtual else "true"
    return {k: v for k, v in extra.items() if k not in props}


# pyiceberg's names of a catalog's S3 properties -> Hadoop S3A's (per bucket: `fs.s3a.bucket.<b>.`).
_S3A_KEYS = {
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.session-token": "session.token",
    "s3.region": "endpoint.region",
    "s3.endpoint": "endpoint",
}


def hadoop_s3a(props: Mapping[str, str], location: str) -> dict[str, str]:
    """Hadoop's S3A settings for the bucket of `location` (`s3a://`, or `s3://` where
    `fs.s3.impl` is S3A: a Hudi-family session) from the catalog's resolved properties, as
    Spark's Hudi jobs reach a table on S3: per bucket, so that two catalogs' buckets keep
    their own credentials in one JVM. Credentials among them: set on the running session
    (`spark.session.set_secrets`), never on a command line."""
    if not on_s3(location):
        return {}
    prefix = f"fs.s3a.bucket.{urlsplit(location).netloc}."
    out = {prefix + key: props[name] for name, key in _S3A_KEYS.items() if name in props}
    virtual = props.get("s3.force-virtual-addressing", "false").lower() == "true"
    out[prefix + "path.style.access"] = "false" if virtual else "true"
    if props.get("s3.endpoint", "").startswith("http://"):
        out[prefix + "connection.ssl.enabled"] = "false"
    return out


# pyiceberg's names of a catalog's S3 properties -> Rust object_store's (hudi-rs, delta-rs).
_READER_KEYS = {
    "s3.access-key-id": "aws_access_key_id",
    "s3.secret-access-key": "aws_secret_access_key",
    "s3.session-token": "aws_session_token",
    "s3.region": "aws_region",
    "s3.endpoint": "aws_endpoint_url",
}


def reader_options(props: Mapping[str, str], location: str) -> dict[str, str]:
    """hudi-rs' `options` and delta-rs' `storage_options` for a table at `location` from
    the catalog's resolved properties: its `s3.*` ones for a table on S3; its `hadoop.*`
    ones (as `hdfs.client_config` gives them) for one on HDFS, which delta-rs reads through
    hdfs-native (hudi-rs 0.5 has no HDFS store: "Unable to recognise URL")."""
    if on_hdfs(location):
        return client_config(dict(props))
    if not on_s3(location):
        return {}
    out = {key: props[name] for name, key in _READER_KEYS.items() if name in props}
    if out.get("aws_endpoint_url", "").startswith("http://"):
        out["aws_allow_http"] = "true"
    virtual = props.get("s3.force-virtual-addressing", "false").lower() == "true"
    out["aws_virtual_hosted_style_request"] = "true" if virtual else "false"
    return out


def filesystem(props: Mapping[str, str], location: str) -> tuple[FileSystem, str]:
    """pyarrow's file system for `location` on S3 with the catalog's properties (pyiceberg's
    own conversion, as a table's FileIO reads them), and the path in it."""
    parts = urlsplit(location)
    fs = PyArrowFileIO(dict(props)).fs_by_scheme(parts.scheme, parts.netloc)
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


def check_warehouse(props: dict[str, str], plain: Collection[str] = ()) -> None:
    """WarehouseUnreachable unless the S3 warehouse in `props` (resolved properties) answers
    with them: its bucket exists and lists with these credentials. Nothing for a warehouse
    not on S3 (a catalog that only knows its tables' locations is checked by its listing).
    The message quotes the warehouse and the endpoint only where they are in `plain` (given
    as values, not read from a reference), and no text of the store's."""
    warehouse = props.get("warehouse", "")
    if not on_s3(warehouse):
        return
    parts = urlsplit(warehouse)
    bucket, prefix = parts.netloc, parts.path.strip("/")

    def shown(key: str, default: str) -> str:
        if key not in props:
            return default
        return repr(props[key]) if key in plain else f"({key}, given by reference)"

    where = f"warehouse {shown('warehouse', '')} at endpoint {shown('s3.endpoint', 'AWS S3')}"
    bucket_named = f"bucket {bucket!r}" if "warehouse" in plain else "its bucket"
    io = PyArrowFileIO(
        {
            "s3.connect-timeout": str(PROBE_CONNECT_TIMEOUT_S),
            "s3.request-timeout": str(PROBE_REQUEST_TIMEOUT_S),
            **props,
        }
    )
    try:
        fs = io.fs_by_scheme(parts.scheme, bucket)
        if fs.get_file_info(bucket).type == FileType.NotFound:
            raise WarehouseUnreachable(f"{where}: {bucket_named} does not exist there")
        fs.get_file_info(FileSelector(f"{bucket}/{prefix}".rstrip("/"), allow_not_found=True))
    except OSError as exc:
        raise WarehouseUnreachable(f"{where}: {_why(str(exc))}") from None


_REFUSED = (
    "ACCESS_DENIED",
    "SIGNATURE_DOES_NOT_MATCH",
    "INVALID_ACCESS_KEY_ID",
    "InvalidAccessKeyId",
    "AccessDenied",
    "HTTP response code: 403",
)
_SILENT = ("NETWORK_CONNECTION", "curlCode", "Could not connect", "timed out", "Timeout")


def _why(message: str) -> str:
    """What pyarrow's S3 error means, in words, without its text (it can quote a request)."""
    if any(mark in message for mark in _REFUSED):
        return (
            "the endpoint refused these credentials (access denied): check the references "
            "of s3.access-key-id and s3.secret-access-key"
        )
    if any(mark in message for mark in _SILENT):
        return "the endpoint did not answer (connection refused or timed out): check s3.endpoint"
    code = re.search(r"AWS Error ([A-Z_]{1,64}) ", message)  # an error's name, not its text
    return f"the endpoint answered with an error{f' ({code[1]})' if code else ''}"
