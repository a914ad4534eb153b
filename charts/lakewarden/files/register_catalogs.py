"""The chart's post-install/post-upgrade hook: register the values' `catalogs` through the
API (POST /api/v1/catalogs), or bring an existing one up to date (PATCH). Catalogs removed
from the values are left registered: removing one is refused while it manages tables, and
is an operator's decision (DELETE /api/v1/catalogs/{name}).

Reads CATALOGS_FILE (the values' list as JSON), API_URL, API_TOKEN; waits up to
WAIT_SECONDS for the API to be ready. Exits non-zero on any refusal, so the release shows it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import httpx


def request_body(catalog: dict[str, Any]) -> dict[str, Any]:
    body = {"name": catalog["name"], "type": catalog["type"], "properties": catalog["properties"]}
    if "pollIntervalS" in catalog:
        body["poll_interval_s"] = catalog["pollIntervalS"]
    if "pollConcurrency" in catalog:
        body["poll_concurrency"] = catalog["pollConcurrency"]
    return body


def register(api: httpx.Client, catalog: dict[str, Any]) -> str:
    body = request_body(catalog)
    r = api.post("/api/v1/catalogs", json=body)
    if r.status_code == 201:
        return "registered"
    if r.status_code != 409:
        raise SystemExit(f"catalog {catalog['name']}: {r.status_code} {r.text}")
    patch = {k: v for k, v in body.items() if k not in ("name", "type")}
    r = api.patch(f"/api/v1/catalogs/{catalog['name']}", json=patch)
    if r.status_code != 200:
        raise SystemExit(f"catalog {catalog['name']}: {r.status_code} {r.text}")
    return "updated"


def wait_ready(api: httpx.Client, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if api.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the API at {api.base_url} was not ready within {seconds:.0f}s")
        time.sleep(3)


def main() -> int:
    with open(os.environ["CATALOGS_FILE"]) as fh:
        catalogs = json.load(fh)
    headers = {"Authorization": f"Bearer {os.environ['API_TOKEN'].strip()}"}
    with httpx.Client(base_url=os.environ["API_URL"], headers=headers, timeout=60) as api:
        wait_ready(api, float(os.environ.get("WAIT_SECONDS", "300")))
        for catalog in catalogs:
            print(f"catalog {catalog['name']}: {register(api, catalog)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
