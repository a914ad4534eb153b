"""Conditional table loads on a REST catalog: what a poll needs, and nothing it does not.

A poll of a REST catalog must load each managed table to see its metadata pointer (a list
does not return pointers). Two things make the steady poll cheap:

- **`If-None-Match`** with the `ETag` the catalog answered last time (the REST spec's
  conditional load): a catalog that supports it answers `304 Not Modified` without sending
  the table's metadata. pyiceberg 0.12's `load_table` neither sends nor keeps ETags.
- **No parse of an unchanged table**: when the catalog sends the metadata anyway (no ETag
  support, or an ETag lost), only its `metadata-location` is read; the full metadata is
  parsed into a pyiceberg `Table` only when the pointer moved.

It goes through the pyiceberg client's own authenticated session and URL building (private
names, pinned with pyiceberg like `catalog.find_tables`), so OAuth2, SigV4, prefixes and
headers stay pyiceberg's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyiceberg.catalog.rest import Endpoints, RestCatalog, TableResponse
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from requests import HTTPError

from lakewarden.catalogs.catalog import TableRef


@dataclass(frozen=True)
class Load:
    """One conditional load. `table` is set only when the pointer moved from the known one
    (or nothing was known); `gone`: the catalog has no such table; `etag`: what to send
    next time (None if the catalog sends none)."""

    table: Table | None = None
    gone: bool = False
    etag: str | None = None
    location: str | None = None


def load_if_changed(
    client: RestCatalog, ref: TableRef, known: str | None, etag: str | None
) -> Load:
    """Load `ref` unless the catalog says it is unchanged since `etag`, or its pointer is
    still `known`."""
    identifier = ref.identifier
    url = client.url(
        Endpoints.load_table, prefixed=True, **client._split_identifier_for_path(identifier)
    )
    headers = {"If-None-Match": etag} if etag else None
    response = client._session.get(url, headers=headers)
    if response.status_code == 304:
        return Load(etag=etag, location=known)
    if response.status_code == 404:
        return Load(gone=True)
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(exc, {404: NoSuchTableError})
    new_etag = response.headers.get("ETag")
    body = response.text
    location = json.loads(body).get("metadata-location")
    if known is not None and location == known:
        return Load(etag=new_etag, location=location)
    parsed = TableResponse.model_validate_json(body)
    table = client._response_to_table(client.identifier_to_tuple(identifier), parsed)
    return Load(table=table, etag=new_etag, location=location)
