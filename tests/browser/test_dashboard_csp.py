"""The dashboard under its Content-Security-Policy (services/api/headers.py) in Chromium:
the vendored htmx still loads the table page's panels, the plots (inline SVG) draw, and no
page logs a CSP violation (`open_page` fails the test on any console error). No Spark: a
registered table is enough."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from helpers import append_batches, bearer, issue_token, make_table
from playwright.sync_api import expect
from test_dashboard import browser, login, open_page  # noqa: F401 (fixtures)

from lakewarden.runtime import Runtime
from services.api.app import serve_in_thread
from services.api.headers import DASHBOARD_CSP

pytestmark = pytest.mark.slow  # a Chromium process (no Spark)


def test_the_dashboard_works_under_its_csp(rt: Runtime, open_page: Any) -> None:  # noqa: F811
    append_batches(make_table(rt, "sales", "orders"), 3)
    admin = issue_token(rt, name="csp-admin")
    with serve_in_thread(rt) as url:
        r = httpx.post(
            f"{url}/api/v1/tables",
            json={"namespace": "sales", "name": "orders"},
            headers=bearer(admin),
        )
        assert r.status_code == 201, r.text
        page = open_page(url)
        login(page, admin)
        for path in ("/ui/", "/ui/alerts", "/ui/costs", "/ui/trends"):
            response = page.goto(path)
            assert response is not None and response.status == 200, path
            assert response.headers["content-security-policy"] == DASHBOARD_CSP
        assert page.locator("svg").count() >= 1  # the trends' plots: inline SVG
        page.goto(f"/ui/t/{rt.settings.catalog_name}/sales/orders")
        # htmx (a script of our own) fetched and swapped in each panel.
        for panel in ("#health", "#explain", "#refs"):
            expect(page.locator(f"{panel} .loading")).to_have_count(0, timeout=20_000)
        assert page.locator("#explain").inner_text().strip()
        # ui.css applied (a stylesheet of our own, not inline).
        assert page.evaluate("document.styleSheets.length") >= 1
        assert page.evaluate("typeof htmx") == "object"
