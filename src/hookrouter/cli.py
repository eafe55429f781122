"""The ``hookrouter`` command line.

::

    hookrouter serve --config FILE          run the router until SIGTERM/SIGINT
    hookrouter check-config FILE            validate; print every problem with its key path
    hookrouter send --config FILE --source ID [--type T] [--data JSON]
                                            sign a test event like the provider would, post it
    hookrouter replay --config FILE [--tenant T] [--endpoint E] [--event ID]
                      [--state dead|disabled] [--since T] [--until T] [--dry-run]
                                            replay dead deliveries, with a progress bar
    hookrouter tenants|sources|endpoints list|get|create|delete [ID] [--doc JSON] [--json]
    hookrouter endpoints create ID --filter JSON | endpoints filter-test ID --payload JSON
    hookrouter keys list|create|revoke TENANT [KEY_ID] [--name N] [--json]
                                            the admin API through hookrouter.client
                                            (--url/--token, HOOKROUTER_URL/_TOKEN or --config)
    hookrouter backup --config FILE --to PATH [--force]
                                            consistent copy of the store, also while serving
    hookrouter doctor [--zcrx-interface IF] [--config FILE]
                                            engines that can run here (and why), compiled hot
                                            paths; with FILE: the store (synchronous standby?)
    hookrouter version
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from collections.abc import Callable, Sequence

from hookrouter import __version__
from hookrouter.config import Config, load_config
from hookrouter.errors import ConfigError, HookrouterError

Command = Callable[[argparse.Namespace], int]
EXIT_CONFIG = 2
EXIT_FAILURE = 1


def _load(path: str) -> Config:
    """The config file, its store options checked by the store backend too."""
    from hookrouter.store.backends import choose

    try:
        config = load_config(path)
        store_warnings = choose(config.store).warnings
    except ConfigError as exc:
        print(f"{path}: invalid configuration:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from exc
    return dataclasses.replace(config, warnings=config.warnings + store_warnings)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args.file)
    for warning in config.warnings:
        print(f"warning: {warning}")
    print(
        f"{args.file}: ok ({len(config.tenants)} tenants, {len(config.sources)} sources, "
        f"{len(config.endpoints)} endpoints; engine {config.server.engine}; "
        f"store {config.store.path})"
    )
    return 0


def _event_loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # uvloop is optional on platforms without it
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def _warn_if_stale_build() -> None:
    from hookrouter.buildinfo import compiled_status

    status = compiled_status()
    if status.stale:  # an edited source is not what runs: say so before serving
        logging.getLogger("hookrouter").warning("build: %s", status.summary())


def cmd_serve(args: argparse.Namespace) -> int:
    from hookrouter.runtime import Router
    from hookrouter.store.backends import choose
    from hookrouter.telemetry.logs import configure

    config = _load(args.config)
    configure(config.log, level_override=args.log_level)  # [log]; --log-level wins
    choose(config.store).backend.prepare_process()  # before the store opens
    for warning in config.warnings:
        logging.getLogger("hookrouter").warning("config: %s", warning)
    _warn_if_stale_build()
    router = Router(config)
    with _event_loop_runner() as runner:
        try:
            runner.run(router.run_until_signalled())
        except HookrouterError as exc:
            print(f"hookrouter: {exc.message}", file=sys.stderr)
            return EXIT_FAILURE
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    from hookrouter.sender import send_test_event

    config = _load(args.config)
    try:
        status, body = send_test_event(
            config, args.source, event_type=args.type, data=args.data, url=args.url
        )
    except HookrouterError as exc:
        print(f"hookrouter send: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{status} {body.decode(errors='replace')}")
    return 0 if 200 <= status < 300 else EXIT_FAILURE


def cmd_replay(args: argparse.Namespace) -> int:
    from hookrouter.admin import replay_cli
    from hookrouter.client import ApiError, ConnectError
    from hookrouter.client.commands import client_for

    args.token = None
    client = client_for(args, _load)
    try:
        replay_cli.run(client, args)
    except (ApiError, ConnectError) as exc:
        print(f"hookrouter replay: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        client.close()
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from hookrouter.store.backends import backup

    config = _load(args.config)
    console = Console(stderr=True)
    try:
        with console.status(f"copying {config.store.path} ..."):
            result = backup(config.store, Path(args.to), overwrite=args.force)
    except HookrouterError as exc:
        print(f"hookrouter backup: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    print(
        f"backup: {result.events:,} events, {result.bytes / 1e6:.1f} MB, "
        f"schema v{result.schema_version}, checked, in {result.seconds:.1f} s -> {result.path}"
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from hookrouter.buildinfo import compiled_status
    from hookrouter.ingress.doctor import probe, render

    print(render(probe(zcrx_interface=args.zcrx_interface)))
    print(f"hot paths: {compiled_status().summary()}")
    if args.config:
        return _store_doctor(_load(args.config))
    return 0


def _store_doctor(config: Config) -> int:
    """``--config``: the store; for PostgreSQL, whether commits wait for a synchronous standby."""
    from hookrouter.store.backends import choose

    choice = choose(config.store)
    if choice.backend.name != "postgres":
        print(f"store: {choice.backend.name} (one node, on this machine's disk)")
        return 0
    from hookrouter.store.postgres.backend import PostgresOptions
    from hookrouter.store.postgres.replication import probe_dsn

    options = choice.options
    assert isinstance(options, PostgresOptions)
    try:
        status = asyncio.run(probe_dsn(options.dsn))
    except Exception as exc:  # any failure to reach it is the answer
        print(f"store: postgres: cannot connect: {type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    print(f"store: postgres: {status.summary()}")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    print(f"hookrouter {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hookrouter", description="Multi-tenant webhook router.")
    parser.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default: [log] level)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the router")
    serve.add_argument("--config", "-c", required=True, help="TOML config file")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("file")
    check.set_defaults(func=cmd_check_config)

    send = sub.add_parser("send", help="sign and post a test event to a running router")
    send.add_argument("--config", "-c", required=True)
    send.add_argument("--source", "-s", required=True, help="source id to send to")
    send.add_argument("--type", "-t", default="test.event", help="event type")
    send.add_argument("--data", "-d", default=None, help="JSON object merged into the event")
    send.add_argument("--url", default=None, help="router base URL (default: [server] listen)")
    send.set_defaults(func=cmd_send)

    replay = sub.add_parser("replay", help="replay dead deliveries through a running router")
    from hookrouter.admin.replay_cli import add_arguments as replay_arguments

    replay_arguments(replay)
    replay.set_defaults(func=cmd_replay)

    from hookrouter.client.commands import add_commands

    add_commands(sub, _load)

    copy = sub.add_parser("backup", help="copy the store consistently (also while serving)")
    copy.add_argument("--config", "-c", required=True)
    copy.add_argument("--to", required=True, help="file to write (restore: docs/operations.md)")
    copy.add_argument("--force", action="store_true", help="replace the file if it exists")
    copy.set_defaults(func=cmd_backup)

    doctor = sub.add_parser("doctor", help="report io_uring/epoll support and engine choices")
    doctor.add_argument(
        "--zcrx-interface",
        default="lo",
        help="network interface to try a zero-copy receive registration on (default: lo; "
        "on a real NIC a successful probe restarts its rx queue 0)",
    )
    doctor.add_argument(
        "--config",
        "-c",
        default=None,
        help="also check this config's store (PostgreSQL: is there a synchronous standby?)",
    )
    doctor.set_defaults(func=cmd_doctor)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookrouter`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=(args.log_level or "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    func: Command = args.func
    return func(args)
