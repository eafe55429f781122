"""``hookrouter tenants|sources|endpoints|keys ...``: the admin API from a shell.

``endpoints create ID --filter JSON`` sets the endpoint's content filter;
``endpoints filter-test ID --payload JSON [--type T] [--header N=V]
[--filter JSON]`` asks whether such an event would reach it, and why not.

Each subcommand is one client call (``hookrouter.client.Client``); ``--json``
prints the answer as JSON (one document, lists as arrays), otherwise one line
per item. The router is found from ``--url`` and ``--token``, else from the
environment (``HOOKROUTER_URL``, ``HOOKROUTER_TOKEN``), else from a config
file (``--config``: ``[admin] listen`` or ``[server] listen``, ``[admin] token``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from hookrouter.client._api import Client
from hookrouter.client.transport import ApiError, ConnectError

Action = Callable[[Client, argparse.Namespace], Any]
EXIT_FAILURE = 1
_ENTITIES = ("tenants", "sources", "endpoints")


def connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="take the URL and token from this config file")
    parser.add_argument("--url", help="router base URL (env HOOKROUTER_URL)")
    parser.add_argument("--token", help="admin token or tenant key (env HOOKROUTER_TOKEN)")


def client_for(args: argparse.Namespace, load: Callable[[str], Any]) -> Client:
    """A client for the router ``args`` name; ``load`` reads a config file (``cli._load``)."""
    url = args.url or os.environ.get("HOOKROUTER_URL")
    token = args.token or os.environ.get("HOOKROUTER_TOKEN")
    if (url is None or token is None) and args.config:
        config = load(args.config)
        host, port = config.admin.listen or (config.server.host, config.server.port)
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        url = url or f"http://{host}:{port}"
        token = token or config.admin.token
    if not url or not token:
        raise SystemExit("give --url and --token (or HOOKROUTER_URL/HOOKROUTER_TOKEN, or --config)")
    return Client(url, token)


def add_commands(sub: Any, load: Callable[[str], Any]) -> None:
    """Add ``tenants``, ``sources``, ``endpoints`` and ``keys`` to the CLI's subparsers."""
    for plural in _ENTITIES:
        parser = sub.add_parser(plural, help=f"list, read, create or delete {plural}")
        actions = parser.add_subparsers(dest="action", required=True)
        singular = plural.removesuffix("s")
        _action(actions, "list", f"every {singular}", load, _lister(plural))
        _action(actions, "get", f"one {singular}", load, _getter(singular), "id")
        create = _action(
            actions, "create", f"create or replace a {singular}", load, _putter(singular), "id"
        )
        create.add_argument("--doc", default="{}", help="the document as JSON (fields beside id)")
        _action(actions, "delete", f"delete a {singular}", load, _deleter(singular), "id")
        if plural == "endpoints":
            create.add_argument("--filter", help="content filter as JSON (replaces --doc's)")
            _filter_test_command(actions, load)
    keys = sub.add_parser("keys", help="a tenant's API keys: list, create, revoke")
    actions = keys.add_subparsers(dest="action", required=True)
    _action(actions, "list", "a tenant's keys", load, lambda c, a: c.list_keys(a.tenant), "tenant")
    create = _action(
        actions,
        "create",
        "mint a key (printed once)",
        load,
        lambda c, a: c.create_key(a.tenant, {"name": a.name} if a.name else {}),
        "tenant",
    )
    create.add_argument("--name", help="a label for the key")
    _action(
        actions,
        "revoke",
        "revoke a key at once",
        load,
        lambda c, a: c.revoke_key(a.tenant, a.key_id),
        "tenant",
        "key_id",
    )


def _action(
    actions: Any,
    name: str,
    summary: str,
    load: Callable[[str], Any],
    call: Action,
    *positional: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(name, help=summary)
    for arg in positional:
        parser.add_argument(arg)
    connection_args(parser)
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.set_defaults(func=lambda args: _run(args, load, call))
    return parser


def _run(args: argparse.Namespace, load: Callable[[str], Any], call: Action) -> int:
    client = client_for(args, load)
    try:
        result = call(client, args)
    except (ApiError, ConnectError) as exc:
        print(f"hookrouter {args.command} {args.action}: {exc}", file=sys.stderr)
        for issue in getattr(exc, "issues", []):
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        client.close()
    print(_render(result, as_json=args.json))
    return 0


def _render(result: Any, *, as_json: bool) -> str:
    plain = msgspec.to_builtins(result)
    if as_json:
        return orjson.dumps(plain, option=orjson.OPT_INDENT_2).decode()
    if plain is None:
        return "ok"
    items = plain if isinstance(plain, list) else [plain]
    return (
        "\n".join(
            "  ".join(
                f"{k}={orjson.dumps(v).decode() if not isinstance(v, str) else v}"
                for k, v in item.items()
            )
            for item in items
        )
        or "(none)"
    )


def _lister(plural: str) -> Action:
    return lambda c, a: getattr(c, f"list_{plural}")()


def _getter(singular: str) -> Action:
    return lambda c, a: getattr(c, f"get_{singular}")(a.id)


def _putter(singular: str) -> Action:
    def put(client: Client, args: argparse.Namespace) -> Any:
        doc = _json_arg("--doc", args.doc)
        if not isinstance(doc, dict):
            raise SystemExit("--doc must be a JSON object")
        if getattr(args, "filter", None) is not None:
            doc["filter"] = _json_arg("--filter", args.filter)
        return getattr(client, f"put_{singular}")(args.id, {**doc, "id": args.id})

    return put


def _filter_test_command(actions: Any, load: Callable[[str], Any]) -> None:
    parser = _action(
        actions,
        "filter-test",
        "would an event like this reach the endpoint, and if not why",
        load,
        _filter_test,
        "id",
    )
    parser.add_argument("--payload", default="null", help="the event's JSON body")
    parser.add_argument("--type", help="the event type (checked against event_types)")
    parser.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE", help="a request header"
    )
    parser.add_argument("--filter", help="a draft filter (JSON) to try instead of the saved one")


def _filter_test(client: Client, args: argparse.Namespace) -> Any:
    sample: dict[str, Any] = {"payload": _json_arg("--payload", args.payload)}
    if args.type is not None:
        sample["type"] = args.type
    if args.filter is not None:
        sample["filter"] = _json_arg("--filter", args.filter)
    headers = dict(h.partition("=")[::2] for h in args.header)
    if headers:
        sample["headers"] = headers
    return client.test_filter(args.id, sample)


def _json_arg(flag: str, text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SystemExit(f"{flag} is not valid JSON: {exc}") from exc


def _deleter(singular: str) -> Action:
    return lambda c, a: getattr(c, f"delete_{singular}")(a.id)


__all__ = ["add_commands", "client_for", "connection_args"]
