"""`lakewarden <command>`: one CLI for every process and chore."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from lakewarden.redact import RedactingFilter, secrets_of
from lakewarden.settings import get_settings


def _setup_logging() -> None:
    logging.basicConfig(
        level=get_settings().log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    for noisy in ("py4j", "httpx", "httpcore", "pyiceberg", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Whatever a library or an exception says, no secret of ours reaches the log.
    redacting = RedactingFilter(secrets_of(get_settings()))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redacting)


def _cmd_migrate(_: argparse.Namespace) -> int:
    from lakewarden.db.migrate import migrate
    from lakewarden.runtime import make_runtime

    rt = make_runtime("migrate")
    migrate(rt)
    print(f"schema at head; catalog {rt.settings.catalog_name!r} ready")
    return 0


def _cmd_api(args: argparse.Namespace) -> int:
    from lakewarden.runtime import make_runtime
    from services.api.app import main

    s = get_settings()
    main(make_runtime("api"), args.host or s.api_host, args.port or s.api_port)
    return 0


def _cmd_worker(_: argparse.Namespace) -> int:
    from lakewarden.runtime import make_runtime
    from services.worker.main import main

    main(make_runtime("worker"))
    return 0


def _cmd_scheduler(_: argparse.Namespace) -> int:
    from lakewarden.runtime import make_runtime
    from services.scheduler.main import main

    main(make_runtime("scheduler"))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from lakewarden.demo import run_demo

    return run_demo(as_json=args.json, target_files=args.files, timeout_s=args.timeout)


def _cmd_db(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from lakewarden.db.embedded import restart_server, stop_server
    from lakewarden.db.session import resolve_database_url

    s = get_settings()
    if args.action == "url":
        url = make_url(resolve_database_url(s))
        print(url.render_as_string(hide_password=not args.show_password))
    elif args.action == "stop":
        print("stopped" if stop_server(s.data_dir) else "not running")
    elif args.action == "restart":
        print("restarted" if restart_server(s.data_dir) else "not running")
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    """Tokens straight in the database: the bootstrap path (no API, no token needed), and
    for whoever runs the control plane. Every change is audited as `cli:<os user>`."""
    import getpass
    from datetime import UTC, datetime, timedelta

    from lakewarden.auth import tokens
    from lakewarden.auth.grants import Grant, InvalidGrant, parse_grants
    from lakewarden.db.migrate import migrate
    from lakewarden.db.session import transaction
    from lakewarden.runtime import make_runtime

    actor = f"cli:{getpass.getuser()}"
    rt = make_runtime("cli")
    migrate(rt)  # the first token may come before anything else ran (idempotent, locked)
    with transaction(rt.engine) as session:
        if args.action == "create":
            try:
                grants = parse_grants(["admin"] if args.admin else (args.grant or []))
            except InvalidGrant as exc:
                print(f"lakewarden token create: {exc} (or pass --admin)", file=sys.stderr)
                return 2
            days = args.expires_days
            expires = None if days <= 0 else datetime.now(UTC) + timedelta(days=days)
            token, secret = tokens.issue(
                session,
                name=args.name,
                owner=args.owner or actor,
                grants=grants,
                created_by=actor,
                expires_at=expires,
            )
            change = {"token": {"grants": [str(g) for g in grants]}}
            _audit(session, actor, "create", token, change)
            print(
                f"token {token.id} ({token.name}): {', '.join(map(str, grants))}, "
                f"expires {expires or 'never'}. The secret follows; it is not shown again:",
                file=sys.stderr,
            )
            print(secret)
        elif args.action == "list":
            for t in tokens.list_tokens(session, include_revoked=args.all):
                state = "revoked" if t.revoked_at else "active"
                grants_text = ",".join(str(Grant.of(g)) for g in t.grants)
                print(
                    f"{t.id}\t{t.name}\t{t.owner}\t{grants_text}\t{state}\t"
                    f"expires={t.expires_at or 'never'}\tlast_used={t.last_used_at or 'never'}"
                )
        else:
            revoked = tokens.revoke(session, args.id, by=actor)
            if revoked is None:
                print(f"no token {args.id}", file=sys.stderr)
                return 1
            _audit(session, actor, "revoke", revoked, None)
            print(f"revoked token {revoked.id} ({revoked.name})")
    return 0


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


def _cmd_jars(_: argparse.Namespace) -> int:
    from lakewarden.spark.jars import resolve_jars

    spec = resolve_jars(get_settings())
    print(f"source: {spec.source}")
    for item in spec.jars + spec.packages:
        print(item)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """A probe for Kubernetes (exec): is this pod's `role` process beating? Its heartbeat row
    in process_heartbeats is found by (role, hostname): a container's hostname is its pod's
    name, unique in the cluster, and a pod runs one lakewarden process (the process id's
    random suffix cannot be known from outside). Stale means older than STALE_AFTER_S, when
    the fleet itself takes the process's work away; the age is the database's own clock."""
    import socket

    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from lakewarden.db.session import resolve_database_url

    s = get_settings()
    host = args.hostname or socket.gethostname()
    max_age = args.max_age if args.max_age is not None else s.stale_after_s
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
                {"role": args.role, "host": host},
            ).scalar()
    except Exception as exc:
        # Liveness: a database outage is not this process's fault, and restarting every pod
        # would not end it; readiness (the default) reports it.
        print(f"cannot read heartbeats: {type(exc).__name__}", file=sys.stderr)
        return 0 if args.liveness else 1
    finally:
        engine.dispose()
    if age is None:
        print(f"no {args.role} heartbeat from {host}", file=sys.stderr)
        return 1
    if float(age) > max_age:
        print(f"{args.role} on {host}: last heartbeat {float(age):.0f}s ago", file=sys.stderr)
        return 1
    print(f"{args.role} on {host}: heartbeat {float(age):.1f}s ago")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakewarden", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="upgrade the schema, prepare the catalog and its commit trigger")
    api = sub.add_parser("api", help="run the API server (commit listener, poller, REST)")
    api.add_argument("--host")
    api.add_argument("--port", type=int)
    sub.add_parser("worker", help="run a planning worker")
    sub.add_parser("scheduler", help="run a scheduler (leads or stands by)")
    demo = sub.add_parser("demo", help="end to end on a demo table: commits → compaction")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.add_argument("--files", type=int, default=300, help="small files to write first")
    demo.add_argument("--timeout", type=float, default=600, help="seconds to wait for the task")
    db = sub.add_parser("db", help="the embedded Postgres")
    db.add_argument("action", choices=["url", "stop", "restart"])
    db.add_argument(
        "--show-password",
        action="store_true",
        help="url: print the password too (else ***; the embedded one is in <data_dir>/pg)",
    )
    sub.add_parser("jars", help="resolve (and build, if needed) the Spark jars")
    check = sub.add_parser(
        "check", help="probe: exit 1 unless this host's ROLE process beat within STALE_AFTER_S"
    )
    check.add_argument("--role", required=True, choices=["api", "worker", "scheduler"])
    check.add_argument("--liveness", action="store_true", help="a database outage passes")
    check.add_argument("--max-age", type=float, help="seconds (default: STALE_AFTER_S)")
    check.add_argument("--hostname", help="whose heartbeat (default: this host's name)")
    token = sub.add_parser("token", help="API tokens, straight in the database (bootstrap)")
    tsub = token.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create", help="print a new token's secret (shown once)")
    create.add_argument("--name", required=True)
    create.add_argument("--owner", help="who answers for it (default: cli:<os user>)")
    create.add_argument(
        "--grant",
        action="append",
        help="role[@catalog[/namespace-glob]], repeatable, e.g. operator@lake/sales_*",
    )
    create.add_argument("--admin", action="store_true", help="admin of everything")
    create.add_argument("--expires-days", type=float, default=90, help="0 or less: never expires")
    listing = tsub.add_parser("list", help="tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="revoked ones too")
    revoke = tsub.add_parser("revoke", help="refused by every replica from now on")
    revoke.add_argument("id", type=int)
    p.set_defaults()
    return p


COMMANDS = {
    "migrate": _cmd_migrate,
    "api": _cmd_api,
    "worker": _cmd_worker,
    "scheduler": _cmd_scheduler,
    "demo": _cmd_demo,
    "db": _cmd_db,
    "jars": _cmd_jars,
    "check": _cmd_check,
    "token": _cmd_token,
}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    _setup_logging()
    sys.exit(COMMANDS[args.command](args))
