"""`lakewarden <command>`: one CLI for every process and chore, and the operator's commands
over the REST API (cli/ops.py).

Importing this module stays cheap (typer only): `lakewarden --help` and shell completion
run it on every keystroke, so each command imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import data as cli_data
from cli import ops as cli_ops
from cli.client import TOKEN_ENV, URL_ENV
from cli.output import Format
from lakewarden import __version__

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from lakewarden.settings import Settings

app = typer.Typer(
    name="lakewarden",
    help="lakewarden: a table-management control plane for Apache Iceberg tables.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # a failure is a message, never a traceback with locals
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lakewarden {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar=URL_ENV,
            show_default=False,
            help="the API the operator commands call (default: http://127.0.0.1:<api port>)",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar=TOKEN_ENV,
            show_default=False,
            help="an API token for the operator commands (`lakewarden token create`)",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version")
    ] = False,
) -> None:
    ctx.obj = cli_ops.Target(url=url, token=token)
    from lakewarden.logs import setup_logging

    setup_logging()


def _exit(code: int) -> None:
    if code:
        raise typer.Exit(code)


def _settings() -> Settings:
    from lakewarden.settings import get_settings

    return get_settings()


# --- the processes -----------------------------------------------------------------------


@app.command()
def migrate() -> None:
    """Upgrade the schema, prepare the catalog and its commit trigger."""
    from lakewarden.db.migrate import migrate
    from lakewarden.runtime import make_runtime

    rt = make_runtime("migrate")
    migrate(rt)
    typer.echo(f"schema at head; catalog {rt.settings.catalog_name!r} ready")


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="default: LAKEWARDEN_API_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default: LAKEWARDEN_API_PORT")] = None,
) -> None:
    """Run the API server (commit listener, poller, REST)."""
    from lakewarden.runtime import make_runtime
    from services.api.app import main

    s = _settings()
    main(make_runtime("api"), host or s.api_host, port or s.api_port)


@app.command()
def worker() -> None:
    """Run a planning worker."""
    from lakewarden.runtime import make_runtime
    from services.worker.main import main

    main(make_runtime("worker"))


@app.command()
def scheduler() -> None:
    """Run a scheduler (leads or stands by)."""
    from lakewarden.runtime import make_runtime
    from services.scheduler.main import main

    main(make_runtime("scheduler"))


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    files: Annotated[int, typer.Option(help="small files to write first")] = 300,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the task")] = 600,
) -> None:
    """End to end on a demo table: commits → compaction."""
    from cli.demo import run_demo

    _exit(run_demo(as_json=as_json, target_files=files, timeout_s=timeout))


# --- chores: the embedded Postgres, the Spark jars ---------------------------------------

db_app = typer.Typer(help="The embedded Postgres.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("url")
def db_url(
    show_password: Annotated[
        bool,
        typer.Option(
            help="print the password too (else ***; the embedded one is in <data_dir>/pg)"
        ),
    ] = False,
) -> None:
    """The database URL lakewarden uses."""
    from sqlalchemy.engine import make_url

    from lakewarden.db.session import resolve_database_url

    url = make_url(resolve_database_url(_settings()))
    typer.echo(url.render_as_string(hide_password=not show_password))


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded Postgres."""
    from lakewarden.db.embedded import stop_server

    typer.echo("stopped" if stop_server(_settings().data_dir) else "not running")


@db_app.command("restart")
def db_restart() -> None:
    """Restart the embedded Postgres."""
    from lakewarden.db.embedded import restart_server

    typer.echo("restarted" if restart_server(_settings().data_dir) else "not running")


@app.command()
def jars(
    check: bool = typer.Option(
        False, "--check", help="hash the cached jars against jars.lock; fetch nothing"
    ),
    servers: bool = typer.Option(
        False,
        "--servers",
        help="the test servers' jars too (jars.lock's server-… groups: Hadoop's HDFS daemons, "
        "Hive's listener, S3Proxy, Trino)",
    ),
) -> None:
    """Fetch the pinned Spark jars (jars.lock) from Maven Central into the cache, and show
    what Spark gets. With --check: verify the cache, exit 1 naming each jar that differs."""
    from lakewarden.spark.jars import (
        FAMILY_GROUPS,
        JarsUnavailable,
        check_pinned,
        read_lock,
        resolve_jars,
        server_jars,
        unpacked,
    )

    settings = _settings()
    if check:
        cache = settings.jars_cache_dir / "maven"
        problems = check_pinned(cache, [p for p in read_lock() if servers or p.for_spark])
        for problem in problems:
            typer.echo(problem, err=True)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"every pinned jar in {cache} matches jars.lock")
        return
    try:
        spec = resolve_jars(settings)
        # Each further session family's own jars (Hudi's bundle), fetched now too.
        families = {f: resolve_jars(settings, f) for f in FAMILY_GROUPS}
        groups = sorted({p.group for p in read_lock() if not p.for_spark}) if servers else []
        extra = [
            str(path if path.suffix == ".jar" else unpacked(path))  # an archive: unpack it
            for group in groups
            for path in server_jars(settings, group)
        ]
    except JarsUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"source: {spec.source}")
    for item in spec.jars + spec.packages:
        typer.echo(item)
    for family, fspec in families.items():
        for item in fspec.jars + fspec.packages:
            if item not in spec.jars + spec.packages:
                typer.echo(f"{family}: {item}")
    for item in extra:
        typer.echo(f"server: {item}")


# --- check: the fleet through the API, or this pod's process by its heartbeat -------------


class ProcessRole(StrEnum):
    api = "api"
    worker = "worker"
    scheduler = "scheduler"


@app.command()
def check(
    ctx: typer.Context,
    role: Annotated[
        ProcessRole | None,
        typer.Option(help="probe this host's ROLE process by its heartbeat (Kubernetes probes)"),
    ] = None,
    liveness: Annotated[bool, typer.Option(help="--role: a database outage passes")] = False,
    max_age: Annotated[
        float | None, typer.Option(help="--role: seconds (default: STALE_AFTER_S)")
    ] = None,
    hostname: Annotated[
        str | None, typer.Option(help="--role: whose heartbeat (default: this host's name)")
    ] = None,
    output: cli_ops.Output = Format.table,
) -> None:
    """Exit 1 when unhealthy, for probes and cron.

    Without --role: the fleet as the API sees it: the API is ready, a scheduler leads, no
    critical alert fires unacknowledged (a global freeze is reported, not failed).
    With --role: this host's ROLE process beat within STALE_AFTER_S (its heartbeat row, read
    straight from the database: the worker's and scheduler's Kubernetes probes)."""
    if role is None:
        if liveness or max_age is not None or hostname is not None:
            raise typer.BadParameter("--liveness, --max-age and --hostname need --role")
        _exit(cli_ops.check_fleet(ctx, output))
    else:
        _exit(check_heartbeat(_settings(), role.value, liveness, max_age, hostname))


def check_heartbeat(
    s: Settings, role: str, liveness: bool, max_age_s: float | None, hostname: str | None
) -> int:
    """Is this pod's `role` process beating? Its heartbeat row in process_heartbeats is
    found by (role, hostname): a container's hostname is its pod's name, unique in the
    cluster, and a pod runs one lakewarden process (the process id's random suffix cannot be
    known from outside). Stale means older than STALE_AFTER_S, when the fleet itself takes
    the process's work away; the age is the database's own clock."""
    import socket

    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from lakewarden.db.session import resolve_database_url

    host = hostname or socket.gethostname()
    max_age = max_age_s if max_age_s is not None else s.stale_after_s
    engine = create_engine(
        resolve_database_url(s), poolclass=NullPool, connect_args={"connect_timeout": 5}
    )
    try:
        with engine.connect() as conn:
            age = conn.execute(
                text(
                    "SELECT extract(epoch FROM now() - max(last_seen)) FROM process_heartbeats "
                    "WHERE role = :role AND hostname = :host"
                ),
                {"role": role, "host": host},
            ).scalar()
    except Exception as exc:
        # Liveness: a database outage is not this process's fault, and restarting every pod
        # would not end it; readiness (the default) reports it.
        typer.echo(f"cannot read heartbeats: {type(exc).__name__}", err=True)
        return 0 if liveness else 1
    finally:
        engine.dispose()
    if age is None:
        typer.echo(f"no {role} heartbeat from {host}", err=True)
        return 1
    if float(age) > max_age:
        typer.echo(f"{role} on {host}: last heartbeat {float(age):.0f}s ago", err=True)
        return 1
    typer.echo(f"{role} on {host}: heartbeat {float(age):.1f}s ago")
    return 0


# --- tokens, straight in the database ----------------------------------------------------

token_app = typer.Typer(
    help="API tokens, straight in the database (bootstrap).", no_args_is_help=True
)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="what the token is for")],
    owner: Annotated[
        str | None, typer.Option(help="who answers for it (default: cli:<os user>)")
    ] = None,
    grant: Annotated[
        list[str] | None,
        typer.Option(
            help=r"role\[@catalog\[/namespace-glob]], repeatable, e.g. operator@lake/sales_*"
        ),
    ] = None,
    admin: Annotated[bool, typer.Option(help="admin of everything")] = False,
    expires_days: Annotated[
        float | None,
        typer.Option(help="days it lives (default 90), at most LAKEWARDEN_TOKEN_MAX_DAYS"),
    ] = None,
) -> None:
    """Print a new token's secret (shown once)."""
    from lakewarden.auth import tokens
    from lakewarden.auth.grants import InvalidGrant, parse_grants

    try:
        grants = parse_grants(["admin"] if admin else (grant or []))
    except InvalidGrant as exc:
        typer.echo(f"lakewarden token create: {exc} (or pass --admin)", err=True)
        raise typer.Exit(2) from None
    max_days = _settings().token_max_days
    try:
        expires = (
            tokens.default_expiry(max_days)
            if expires_days is None
            else tokens.expiry(expires_days, max_days)
        )
    except tokens.TokenLifetimeError as exc:
        typer.echo(f"lakewarden token create: --expires-days: {exc}", err=True)
        raise typer.Exit(2) from None
    with _token_session() as (session, actor):
        token, secret = tokens.issue(
            session,
            name=name,
            owner=owner or actor,
            grants=grants,
            created_by=actor,
            expires_at=expires,
        )
        _audit(session, actor, "create", token, {"token": {"grants": [str(g) for g in grants]}})
    typer.echo(
        f"token {token.id} ({token.name}): {', '.join(map(str, grants))}, "
        f"expires {expires or 'never'}. The secret follows; it is not shown again:",
        err=True,
    )
    typer.echo(secret)


@token_app.command("list")
def token_list(
    all: Annotated[bool, typer.Option("--all", help="revoked ones too")] = False,
) -> None:
    """Tokens (never their secrets)."""
    from lakewarden.auth import tokens
    from lakewarden.auth.grants import Grant

    with _token_session() as (session, _):
        for t in tokens.list_tokens(session, include_revoked=all):
            state = "revoked" if t.revoked_at else "active"
            grants_text = ",".join(str(Grant.of(g)) for g in t.grants)
            typer.echo(
                f"{t.id}\t{t.name}\t{t.owner}\t{grants_text}\t{state}\t"
                f"expires={t.expires_at or 'never'}\tlast_used={t.last_used_at or 'never'}\t"
                f"created_by={t.created_by}" + (f" (token {t.parent_id})" if t.parent_id else "")
            )


@token_app.command("revoke")
def token_revoke(token_id: Annotated[int, typer.Argument(metavar="ID")]) -> None:
    """Revoke a token: refused by every replica from now on."""
    from lakewarden.auth import tokens

    with _token_session() as (session, actor):
        revoked = tokens.revoke(session, token_id, by=actor)
        if revoked is None:
            typer.echo(f"no token {token_id}", err=True)
            raise typer.Exit(1)
        token, children = revoked
        change = {"token": {"revoked_with_it": children}} if children else None
        _audit(session, actor, "revoke", token, change)
        with_it = f", and the tokens it minted: {', '.join(map(str, children))}" if children else ""
        typer.echo(f"revoked token {token.id} ({token.name}){with_it}")


@contextmanager
def _token_session() -> Iterator[tuple[Session, str]]:
    """A transaction on the control plane's database, migrated first when it is not at head
    (the first token may come before anything else ran; idempotent, locked), and the actor
    `cli:<os user>`. A schema at head is left alone: the services' role, which owns nothing,
    mints tokens after `lakewarden migrate` (the compose stack's writer does)."""
    import getpass

    from lakewarden.db.migrate import migrate, schema_is_current
    from lakewarden.db.session import transaction
    from lakewarden.runtime import make_runtime

    rt = make_runtime("cli")
    if not schema_is_current(rt.engine):
        migrate(rt)
    with transaction(rt.engine) as session:
        yield session, f"cli:{getpass.getuser()}"


def _audit(session: Any, actor: str, verb: str, token: Any, change: dict[str, Any] | None) -> None:
    """A token change made here is audited as the API's would be (action: its operationId)."""
    from lakewarden import audit

    audit.record(
        session,
        actor=actor,
        source="cli",
        method="CLI",
        path=f"token {verb}",
        action=f"{verb}Token",
        target=f"token {token.id} ({token.name})",
        status=0,
        outcome="ok",
        change=change,
    )


cli_ops.register(app)
cli_data.register(app)


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="lakewarden")
