"""Conditional table loads on a REST catalog: what a poll needs, and nothing it does not.

A poll of a REST catalog must load each managed table to see its metadata pointer (a list
does not return pointers). Two things make the steady poll cheap:

- **`If-None-Match`** with the `ETag` the catalog answered last time (the REST spec's
  conditional load): a catalog that supports it answers `304 Not Modified` without sending
  the table's metadata. pyiceberg 0.12's `load_table` neither sends nor keeps ETags.
- **No parse of an unchanged table**: when the catalog sends the metadata anyway (no ETag
  support, or an ETag lost), only its `metadata-location` is read.

A table whose pointer moved (every table in the first poll after adopting a fleet) is
answered as a `MetadataView` of the body's metadata (what ingest reads: its snapshots
parsed only when asked for), not parsed in full into a pyiceberg `Table` (format 1 still
is). And requests reads the environment (proxies, CA bundle: a walk over `os.environ`) on
every request through `Session.request`: a `ConditionalLoads` reads it once per poll.

It goes through the pyiceberg client's own authenticated session and URL building (private
names, pinned with pyiceberg like `catalog.find_tables`), so OAuth2, SigV4, prefixes and
headers stay pyiceberg's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog.rest import Endpoints, RestCatalog, TableResponse
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.exceptions import NoSuchTableError
from requests import HTTPError, Request
from requests.adapters import HTTPAdapter

from lakewarden.catalogs.catalog import TableRef
from lakewarden.catalogs.metadata_view import TableRead, view_of


@dataclass(frozen=True)
class Load:
    """One conditional load. `table` is set only when the pointer moved from the known one
    (or nothing was known); `gone`: the catalog has no such table; `etag`: what to send
    next time (None if the catalog sends none)."""

    table: TableRead | None = None
    gone: bool = False
    etag: str | None = None
    location: str | None = None


class ConditionalLoads:
    """The loads of one poll through `client`'s own session (its auth, headers, adapters),
    with the environment's request settings read once (`client.uri`'s: every load goes to
    that host), not once per request, and a connection kept alive for each of `concurrency`
    loads at once. Safe to call from several threads at once, as the session is."""

    def __init__(self, client: RestCatalog, concurrency: int = 1) -> None:
        self.client = client
        session = client._session
        self._settings: dict[str, Any] = session.merge_environment_settings(
            client.uri, {}, None, None, None
        )
        # requests keeps 10 connections per host alive: with more loads at once, each one
        # past 10 would open a connection (a TLS handshake on a real catalog) and drop it.
        for adapter in session.adapters.values():
            if isinstance(adapter, HTTPAdapter) and adapter._pool_maxsize < concurrency:
                adapter.init_poolmanager(
                    adapter._pool_connections, concurrency, block=adapter._pool_block
                )

    def __call__(self, ref: TableRef, known: str | None, etag: str | None) -> Load:
        """Load `ref` unless the catalog says it is unchanged since `etag`, or its pointer
        is still `known`."""
        client, session = self.client, self.client._session
        identifier = ref.identifier
        url = client.url(
            Endpoints.load_table, prefixed=True, **client._split_identifier_for_path(identifier)
        )
        headers = {"If-None-Match": etag} if etag else {}
        request = session.prepare_request(Request("GET", url, headers=headers))
        response = session.send(request, **self._settings)
        if response.status_code == 304:
            return Load(etag=etag, location=known)
        if response.status_code == 404:
            return Load(gone=True)
        try:
            response.raise_for_status()
        except HTTPError as exc:
            _handle_non_200_response(exc, {404: NoSuchTableError})
        new_etag = response.headers.get("ETag")
        body = json.loads(response.text)
        location = body.get("metadata-location")
        if known is not None and location == known:
            return Load(etag=new_etag, location=location)
        table: TableRead | None = view_of(location, body.get("metadata")) if location else None
        if table is None:  # format 1 (or no pointer): pyiceberg's own parse
            parsed = TableResponse.model_validate(body)
            table = client._response_to_table(client.identifier_to_tuple(identifier), parsed)
        return Load(table=table, etag=new_etag, location=location)
