"""`lakewarden <command>`: one CLI for every process and chore."""

from __future__ import annotations

import argparse
import logging
import sys

from lakewarden.settings import get_settings


def _setup_logging() -> None:
    logging.basicConfig(
        level=get_settings().log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    for noisy in ("py4j", "httpx", "httpcore", "pyiceberg", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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


def _cmd_jars(_: argparse.Namespace) -> int:
    from lakewarden.spark.jars import resolve_jars

    spec = resolve_jars(get_settings())
    print(f"source: {spec.source}")
    for item in spec.jars + spec.packages:
        print(item)
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
}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    _setup_logging()
    sys.exit(COMMANDS[args.command](args))
