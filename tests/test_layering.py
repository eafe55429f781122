"""The house rules on imports: a sans-IO core, and layers that point one way.

House rule 1: the sans-IO core imports no I/O machinery.

Protocol, verification, routing, flow control, retry/breaker policy and the
bucket maths take bytes, events and ``now`` and return decisions; they never
open sockets, files or databases and never read a clock. This walks their
imports (including imports inside functions) so a slip fails here rather
than in review. Transitive imports through other hookrouter modules are
checked too: a pure module may only import hookrouter modules that are pure.

House rule 2 (below): runtime/cli -> console -> admin -> ingress -> delivery -> store ->
config -> ground floor (core, verify, flow, ratelimit) -> leaves; no circles.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import hookrouter

PACKAGE = Path(hookrouter.__file__).parent
PURE_MODULES = [
    "_native/accel.py",
    "core/addresses.py",
    "core/content_coding.py",
    "core/filters.py",
    "core/http1.py",
    "core/http1client.py",
    "core/routing.py",
    *sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "verify").glob("*.py")),
    # The config modules the pure delivery policy, breaker and signing read values from.
    "config/delivery.py",
    "config/durations.py",
    "config/reader.py",
    "flow/backlog.py",
    "flow/credits.py",
    "flow/scheduler.py",
    "delivery/policy.py",
    "delivery/breaker.py",
    "delivery/ssrf.py",
    "delivery/signing.py",
    "store/retention.py",
    "config/retention.py",
    "store/sqlite/dedup_tiers.py",
    "ratelimit/bucket.py",
    "ratelimit/keys.py",
    "ratelimit/slots.py",
    "ratelimit/health.py",
]
# Allowed hookrouter imports from pure code besides other pure modules: data
# definitions with no behaviour (errors, ids, the clock *protocol* is not
# allowed), and the native helpers, C functions over bytes (_native/accel.py).
ALLOWED_SHARED = {
    "hookrouter.errors",
    "hookrouter.ids",
    "hookrouter.providers",
    "hookrouter._native._http1",
    "hookrouter._native._hmac",
}
FORBIDDEN = {
    "asyncio", "socket", "ssl", "selectors", "sqlite3", "redis", "aiohttp", "nats",
    "uvloop", "threading", "subprocess", "time",
}  # fmt: skip
FORBIDDEN_MODULES = {"urllib.request", "http.client", "http.server"}  # urllib.parse is pure


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_name(relative: str) -> str:
    return "hookrouter." + relative.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


PURE_NAMES = {module_name(m) for m in PURE_MODULES}


def test_the_list_covers_real_files() -> None:
    assert len(PURE_MODULES) >= 20
    for relative in PURE_MODULES:
        assert (PACKAGE / relative).is_file(), relative


@pytest.mark.parametrize("relative", PURE_MODULES)
def test_pure_module_imports_no_io(relative: str) -> None:
    imported = imports_of(PACKAGE / relative)
    roots = {name.split(".")[0] for name in imported}
    bad = (roots & FORBIDDEN) | (imported & FORBIDDEN_MODULES)
    assert not bad, f"{relative} imports {sorted(bad)}"
    ours = {name for name in imported if name.startswith("hookrouter.")}
    impure = {
        name
        for name in ours - PURE_NAMES - ALLOWED_SHARED
        if not any(
            name.startswith(pure + ".") or pure.startswith(name + ".") for pure in PURE_NAMES
        )
    }
    assert not impure, f"{relative} imports impure hookrouter modules {sorted(impure)}"


# -- House rule 2: layers point one way ----------------------------------------
#
# Every module of the package belongs to one layer; a module may import its own
# layer and the layers below it, never one above. Imports are read from the
# source (``ast.walk``: imports under ``TYPE_CHECKING`` and inside functions
# count too, because a circle only typing sees is still a circle a reader must
# untangle).

# Top to bottom; a module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "top",
        (
            "hookrouter.runtime",
            "hookrouter.cli",
            "hookrouter.__main__",
            "hookrouter.sender",
            "hookrouter.operator_events",
            "hookrouter.client",  # the admin API's Python client (its types: admin.schemas)
        ),
    ),
    ("console", ("hookrouter.console",)),  # operator console and tenant portal (HTML)
    ("admin", ("hookrouter.admin",)),
    ("ingress", ("hookrouter.ingress",)),
    ("delivery", ("hookrouter.delivery",)),
    ("store", ("hookrouter.store",)),
    ("telemetry", ("hookrouter.telemetry",)),
    (
        "config",
        ("hookrouter.config",),
    ),
    ("ground", ("hookrouter.core", "hookrouter.verify", "hookrouter.flow", "hookrouter.ratelimit")),
    (
        "leaves",
        (
            "hookrouter",  # the package's __init__ only (exact match)
            "hookrouter.errors",
            "hookrouter.ids",
            "hookrouter.clock",
            "hookrouter.providers",
            "hookrouter.metrics",
            "hookrouter.loop_metrics",
            "hookrouter.log_throttle",
            "hookrouter.heap",
            "hookrouter.buildinfo",
            "hookrouter._native",
        ),
    ),
)
LAYER_NAMES = [name for name, _ in LAYERS]
# Store backends: packages below ``store/`` that only the backend table names.
STORE_BACKENDS = ("hookrouter.store.sqlite",)


@dataclass(frozen=True)
class Rule:
    """Modules of ``importers`` (layer names) must not import modules ``forbidden`` selects."""

    name: str
    importers: tuple[str, ...]
    forbidden: Callable[[str], bool]


def _above(layer: str) -> Callable[[str], bool]:
    higher = set(LAYER_NAMES[: LAYER_NAMES.index(layer)])
    return lambda module: layer_of(module) in higher


def _store_backend(module: str) -> bool:
    return any(module == b or module.startswith(b + ".") for b in STORE_BACKENDS)


RULES: tuple[Rule, ...] = (
    Rule("console imports nothing above it (runtime, cli)", ("console",), _above("console")),
    Rule("admin imports nothing above it (runtime, cli)", ("admin",), _above("admin")),
    Rule("ingress imports no admin", ("ingress",), _above("ingress")),
    Rule("delivery imports no ingress or admin", ("delivery",), _above("delivery")),
    Rule("store imports no delivery, ingress or admin", ("store",), _above("store")),
    Rule(
        "telemetry imports no store, delivery, ingress or admin",
        ("telemetry",),
        _above("telemetry"),
    ),
    Rule("config imports no store, delivery, ingress or admin", ("config",), _above("config")),
    Rule("the ground floor imports nothing above it", ("ground",), _above("ground")),
    Rule("leaves import nothing above them", ("leaves",), _above("leaves")),
)
# The store contracts import no backend: checked module by module below (a
# contract is a store module outside every STORE_BACKENDS package).


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            below = prefix != "hookrouter" and module.startswith(prefix + ".")
            if (module == prefix or below) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def module_of(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, for every ``*.py`` below ``root``.

    ``from a.b import c`` is an import of ``a.b.c`` when that is a module, else
    of ``a.b``; relative imports are resolved against the importing module.
    """
    files = {module_of(root, path): path for path in sorted(root.rglob("*.py"))}
    package = root.name
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                    for alias in node.names
                ]
            else:
                continue
            for name in names:
                known = name
                while known and known not in files:
                    known = known.rpartition(".")[0]
                if known and known.split(".")[0] == package:
                    targets.add(known)
        targets.discard(module)
        graph[module] = targets
    return graph


def violations(graph: Mapping[str, set[str]], rule: Rule) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if layer_of(module) in rule.importers
        for target in targets
        if rule.forbidden(target)
    )


def store_contract_violations(graph: Mapping[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if layer_of(module) == "store" and not _store_backend(module)
        for target in targets
        if _store_backend(target)
    )


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def package_of(module: str) -> str:
    """The first name below hookrouter."""
    return module.split(".")[1] if "." in module else module


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), set())
        edges |= {package_of(t) for t in targets} - {package_of(module)}
    return packages


GRAPH = import_graph(PACKAGE)


def test_every_module_has_a_layer() -> None:
    assert len(GRAPH) >= 100
    unplaced = sorted(module for module in GRAPH if layer_of(module) is None)
    assert not unplaced, f"add these modules to a layer in LAYERS: {unplaced}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_layers_point_down(rule: Rule) -> None:
    assert violations(GRAPH, rule) == [], rule.name


def test_no_module_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_store_contracts_import_no_backend() -> None:
    assert store_contract_violations(GRAPH) == []


def test_no_package_import_cycles() -> None:
    assert cycles(package_graph(GRAPH)) == []


# -- the test of the test: an upward import is caught --------------------------


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """A fake ``hookrouter`` tree with upward imports, one only under TYPE_CHECKING."""
    root = tmp_path / "hookrouter"
    _write(root, "__init__.py", "")
    _write(root, "errors.py", "")
    _write(root, "ingress/__init__.py", "")
    _write(root, "ingress/handler.py", "from hookrouter.delivery.listener import Listener\n")
    _write(root, "delivery/__init__.py", "")
    _write(
        root,
        "delivery/listener.py",
        "from typing import TYPE_CHECKING\n"
        "from ..errors import *\n"
        "if TYPE_CHECKING:\n"
        "    from hookrouter.ingress import handler\n",
    )
    _write(root, "store/__init__.py", "")
    _write(root, "store/base.py", "def f():\n    from hookrouter.admin import api\n")
    _write(root, "admin/__init__.py", "")
    _write(root, "admin/api.py", "import hookrouter.store.base\n")
    graph = import_graph(root)
    assert graph["hookrouter.delivery.listener"] == {
        "hookrouter.errors",
        "hookrouter.ingress.handler",
    }
    by_name = {rule.name: rule for rule in RULES}
    delivery = by_name["delivery imports no ingress or admin"]
    store = by_name["store imports no delivery, ingress or admin"]
    assert violations(graph, delivery) == [
        "hookrouter.delivery.listener -> hookrouter.ingress.handler"
    ]
    assert violations(graph, store) == ["hookrouter.store.base -> hookrouter.admin.api"]
    assert cycles(graph) == [
        ["hookrouter.admin.api", "hookrouter.store.base"],
        ["hookrouter.delivery.listener", "hookrouter.ingress.handler"],
    ]
    assert cycles(package_graph(graph)) == [["admin", "store"], ["delivery", "ingress"]]


def test_checker_catches_an_edge_added_to_the_real_graph() -> None:
    graph = {module: set(targets) for module, targets in GRAPH.items()}
    graph["hookrouter.core.http1"].add("hookrouter.store.base")
    graph["hookrouter.store.base"].add("hookrouter.ingress.handler")
    ground = next(r for r in RULES if r.importers == ("ground",))
    store = next(r for r in RULES if r.importers == ("store",))
    assert "hookrouter.core.http1 -> hookrouter.store.base" in violations(graph, ground)
    assert violations(graph, store) == ["hookrouter.store.base -> hookrouter.ingress.handler"]
    assert any("hookrouter.store.base" in c and "hookrouter.core.http1" in c for c in cycles(graph))


def test_store_backend_imported_by_a_contract_is_caught() -> None:
    graph = {"hookrouter.store.ledger": {"hookrouter.store.sqlite.ledger"}}
    assert store_contract_violations(graph) == [
        "hookrouter.store.ledger -> hookrouter.store.sqlite.ledger"
    ]
