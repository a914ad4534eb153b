"""A small client of lakewarden's REST API for the operator CLI: one base URL, one bearer
token, and every failure turned into an `ApiError` whose message an operator can act on
(the API's own 4xx detail; for a connection error, which URL failed and how to point the
CLI elsewhere). The token never appears in a message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import httpx

URL_ENV = "LAKEWARDEN_URL"
TOKEN_ENV = "LAKEWARDEN_TOKEN"


class ApiError(Exception):
    """A call that did not succeed; `str()` says why and what to do. `status` is the HTTP
    status, or None when the API could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def default_url(api_port: int) -> str:
    """Where `lakewarden api` listens when nothing else is configured."""
    return f"http://127.0.0.1:{api_port}"


def table_path(catalog: str | None, namespace: str, name: str) -> str:
    """A table's route: the default catalog's alias unless a catalog is named."""
    where = f"/api/v1/catalogs/{quote(catalog, safe='')}" if catalog else "/api/v1"
    return f"{where}/tables/{quote(namespace, safe='')}/{quote(name, safe='')}"


class Client:
    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        import httpx  # here, not at import: `lakewarden --help` and completion stay fast

        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def get(self, path: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        return self._call("GET", path, params=query)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call("POST", path, json=body if body is not None else {})

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self._call("PUT", path, json=body)

    def status(self, path: str) -> tuple[int, Any]:
        """The status and body of a GET, whatever the status (for probes like /readyz)."""
        response = self._send("GET", path)
        return response.status_code, _body(response)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(_describe(response), response.status_code)
        return _body(response)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        import httpx

        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ApiError(
                f"cannot reach the lakewarden API at {self.url} ({reason}); set {URL_ENV} "
                "(or --url) to the API's address, e.g. http://lakewarden-api:8080"
            ) from None


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _describe(response: httpx.Response) -> str:
    """The API's ErrorOut as one message: its detail, each field's problem, a hint for 401."""
    status = response.status_code
    body = _body(response)
    detail = body.get("detail") if isinstance(body, dict) else None
    message = f"{status}: {detail or response.reason_phrase}"
    if isinstance(body, dict):
        for problem in body.get("errors") or []:
            message += f"\n  {problem.get('field')}: {problem.get('problem')}"
        if status >= 500 and body.get("error_id"):
            message += f" (error_id {body['error_id']} in the API's log)"
    if status == 401:
        message += f"\n  set {TOKEN_ENV} (or --token) to an API token (`lakewarden token create`)"
    return message
