"""The on-call dashboard, served by the API at /ui: server-rendered pages (Jinja2), a little
htmx (vendored, with its licence, in static/vendor: nothing is fetched from elsewhere),
plots as SVG. A sub-application of the API: it shares the API's state (runtime, rate
limiter, OIDC verifier) and middleware (request limits, audit of refused changes), and
answers errors as pages."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from services.api.ui import actions, pages
from services.api.ui.render import HERE, error_page


def create_ui(api: FastAPI) -> FastAPI:
    """The dashboard for `api` (mount it at /ui). Left out of the OpenAPI: it is not API."""
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    ui.state = api.state  # one runtime, rate limiter and verifier for both
    api.state.api_app = api  # what the dashboard's requests to the API go through
    ui.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    ui.include_router(pages.router)
    ui.include_router(actions.router)
    ui.add_exception_handler(Exception, error_page)
    # Starlette routes HTTPException to its own handler unless one is registered for it.
    from starlette.exceptions import HTTPException

    ui.add_exception_handler(HTTPException, error_page)
    from fastapi.exceptions import RequestValidationError

    ui.add_exception_handler(RequestValidationError, error_page)
    return ui
