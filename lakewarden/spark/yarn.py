"""The YARN ResourceManager's REST API (`/ws/v1/cluster/...`): what the scheduler asks of
an application it submitted with `--master yarn` (its state and YARN's diagnostics), and
how it kills one. The web address is the setting `yarn_resourcemanager_url`.

An application's full report (`/apps/{id}`: state, final status, YARN's diagnostics) is
asked first; a ResourceManager that cannot serialise it (Hadoop 3.3's shaded minicluster,
the tests', whose JSON provider trips over the protobuf id) is asked `/apps/{id}/state`
instead: its state, and its diagnostics where it has them.

Applications are found by name as well as by id: lakewarden names each after its job group
(task and attempt: unique), so a leader finds one whose driver never got to record its
application id (an ApplicationMaster that failed to start), and a new leader finds one
after a failover.
"""

from __future__ import annotations

from typing import Any

import httpx

TIMEOUT_S = 10.0
# The states after which an application never runs again.
FINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})
_JSON = {"Accept": "application/json"}


class ResourceManagerUnreachable(RuntimeError):
    """The ResourceManager did not answer (or not as one)."""


def _unwrapped(body: Any, root: str) -> Any:
    # Hadoop's JSON wraps each object in its root element ({"app": {...}}) unless its
    # Jersey is configured to unwrap (the shaded minicluster's is): accept both.
    if isinstance(body, dict) and set(body) == {root}:
        return body[root]
    return body


def _get(web_url: str, path: str, **params: str) -> Any:
    url = f"{web_url.rstrip('/')}/ws/v1/cluster/{path}"
    try:
        response = httpx.get(url, params=params or None, headers=_JSON, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ResourceManagerUnreachable(
            f"the YARN ResourceManager at {web_url} did not answer ({type(exc).__name__}: {exc})"
        ) from exc
    if response.status_code == 404:
        return None
    if response.status_code >= 400:
        raise ResourceManagerUnreachable(
            f"the YARN ResourceManager at {web_url} answered {response.status_code} to {path}"
        )
    try:
        return response.json()
    except ValueError as exc:
        raise ResourceManagerUnreachable(
            f"{web_url} answered {path} with no JSON: is it a YARN ResourceManager?"
        ) from exc


def cluster_info(web_url: str) -> dict[str, Any]:
    """The ResourceManager's `/info` (state STARTED once it serves). Raises
    ResourceManagerUnreachable, naming the address, when it does not answer as one."""
    info = _unwrapped(_get(web_url, "info"), "clusterInfo")
    if not isinstance(info, dict) or "state" not in info:
        raise ResourceManagerUnreachable(f"{web_url} is not a YARN ResourceManager")
    return info


def check_ready(web_url: str) -> None:
    """Raise ResourceManagerUnreachable unless the ResourceManager serves (STARTED)."""
    state = cluster_info(web_url).get("state")
    if state != "STARTED":
        raise ResourceManagerUnreachable(
            f"the YARN ResourceManager at {web_url} is {state}, not STARTED"
        )


def active_nodes(web_url: str) -> int:
    """How many NodeManagers the ResourceManager counts as live."""
    metrics = _unwrapped(_get(web_url, "metrics"), "clusterMetrics") or {}
    return int(metrics.get("activeNodes", 0))


def app_report(web_url: str, app_id: str) -> dict[str, Any] | None:
    """One application's report (`id`, `state`, `diagnostics`; `name`, `finalStatus`, ...
    where the full report is served), or None if the ResourceManager does not know it."""
    try:
        body = _unwrapped(_get(web_url, f"apps/{app_id}"), "app")
    except ResourceManagerUnreachable:
        body = None  # a 500 of the full report: its state is asked below
    if isinstance(body, dict) and body.get("state"):
        return body
    state = _get(web_url, f"apps/{app_id}/state")
    if not isinstance(state, dict) or not state.get("state"):
        return None
    return {"id": app_id, "state": state["state"], "diagnostics": state.get("diagnostics")}


def app_by_name(web_url: str, name: str) -> dict[str, Any] | None:
    """The newest application named `name` (lakewarden's names are unique per attempt)."""
    try:
        body = _unwrapped(_get(web_url, "apps", applicationTypes="SPARK"), "apps") or {}
    except ResourceManagerUnreachable:
        cluster_info(web_url)  # raises if it does not answer at all
        return None  # it answers, but cannot list its applications (see above)
    apps = body.get("app", []) if isinstance(body, dict) else []
    # A ResourceManager whose list lacks the names (see above) finds none.
    named = [a for a in apps if a.get("name") == name and a.get("id")]
    return max(named, key=lambda a: int(a.get("startedTime", 0)), default=None)


def kill(web_url: str, app_id: str) -> None:
    """Ask the ResourceManager to kill `app_id` (its containers go; a client-mode driver
    learns it from YARN and stops its SparkContext)."""
    url = f"{web_url.rstrip('/')}/ws/v1/cluster/apps/{app_id}/state"
    try:
        response = httpx.put(url, json={"state": "KILLED"}, headers=_JSON, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ResourceManagerUnreachable(
            f"the YARN ResourceManager at {web_url} did not answer ({type(exc).__name__})"
        ) from exc
    # 202: the kill is under way; 200: the application is already over.
    if response.status_code >= 400:
        raise ResourceManagerUnreachable(
            f"the YARN ResourceManager at {web_url} refused to kill {app_id}: "
            f"{response.status_code} {response.text[:200]}"
        )


def ended(report: dict[str, Any] | None) -> str | None:
    """Why an application is over, with YARN's diagnostics; None while it may still run."""
    if report is None or report.get("state") not in FINAL_STATES:
        return None
    diagnostics = " ".join(str(report.get("diagnostics") or "").split())
    final = report.get("finalStatus")
    why = f"YARN says {report['state']}" + (f" ({final})" if final else "")
    return f"{why}: {diagnostics[:500]}" if diagnostics else why
