"""Content filters on endpoints: a small operator language over an event's body and headers.

A filter is a JSON object, compiled once when its endpoint is saved
(``parse_filter``) into a tree of small objects that the fan-out evaluates
per event (``Filter.matches``), with no parsing or lookup of operators left
for the hot path. Grammar::

    filter    := {clause, ...}                         every clause holds
    clause    := "<path>": condition                   a field of the JSON body
               | "$headers": {"<name>": condition, ...}  request headers (names case-insensitive)
               | "$and": [filter, ...] | "$or": [filter, ...] | "$not": filter
    condition := literal                               same as {"$eq": literal}
               | {"$<operator>": operand, ...}         every operator holds

    path      := "data.object.amount"   keys joined by dots; a key of digits also indexes a list

Operators: ``$eq $neq $in $nin`` (JSON equality: ``1`` equals ``1.0``, never
``true``), ``$gt $gte $lt $lte`` (numbers with numbers, strings with
strings), ``$exists`` (``null`` exists), ``$prefix $suffix`` (strings),
``$contains`` (a substring of a string, or an element of a list). There are
no regular expressions, so no pattern can backtrack.

A missing path or a value of another type makes an operator false, except
the negative ones, which stay exact negations: ``$neq`` and ``$nin`` hold
and ``{"$exists": false}`` holds. A body that is not JSON has every body
path missing; its headers can still match.

Bounds (``MAX_*``), checked at compile time: a filter has at most
``MAX_NODES`` nodes (clauses, operators and literal values, each list
element one), nests at most ``MAX_DEPTH`` filters deep, has lists of at most
``MAX_LIST`` items, paths of at most ``MAX_PATH_KEYS`` keys and strings of
at most ``MAX_STRING`` characters. Evaluation cost: one evaluation visits
each node at most once, and a node costs its path's lookups plus a
comparison bounded by its literal's size; only ``$prefix``, ``$suffix`` and
``$contains`` may also scan one string or list of the event once (linear in
its length). So an evaluation is O(nodes x (path keys + literal size)) plus
at most one linear scan of event data per scanning operator, whatever the
event holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

MAX_NODES: Final = 256
MAX_DEPTH: Final = 8
MAX_LIST: Final = 100
MAX_PATH_KEYS: Final = 16
MAX_STRING: Final = 1024

LOGICAL: Final = ("$and", "$or", "$not", "$headers")
OPERATORS: Final = (
    "$eq",
    "$neq",
    "$in",
    "$nin",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$exists",
    "$prefix",
    "$suffix",
    "$contains",
)
_SHOWN_CHARS: Final = 80  # how much of a value an explanation quotes


class _Missing:
    """What a path that leads nowhere yields (JSON ``null`` is a value; this is not)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
NOT_PARSED: Final = _Missing()  # ``filter_endpoints``: the caller has not parsed the body


class FilterError(ValueError):
    """An invalid filter; ``issues`` are (path inside the filter, message) pairs."""

    def __init__(self, issues: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in issues))
        self.issues = issues


def parse_body(body: bytes) -> Any:
    """An event body as JSON, or ``MISSING`` when it is not JSON (every body path is missing)."""
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):  # nested deeper than the decoder goes
        return MISSING


# -- JSON values ------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "other"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values: ``1 == 1.0``, but ``true`` is not ``1``."""
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind == "object":
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    return bool(a == b)


def _scalar_key(value: Any) -> tuple[str, Any] | None:
    """A hashable key equal for JSON-equal scalars (None for arrays and objects)."""
    kind = _kind(value)
    return None if kind in {"array", "object"} else (kind, value)


def _show(value: Any) -> str:
    if value is MISSING:
        return "missing"
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


# -- checks: one operator against one value ----------------------------------------


class _Check:
    """One operator with its operand; ``holds`` is true when the value satisfies it."""

    __slots__ = ("text",)

    def __init__(self, op: str, operand: Any) -> None:
        self.text = f"{op} {_show(operand)}"

    def holds(self, value: Any) -> bool:
        raise NotImplementedError


class _Eq(_Check):
    __slots__ = ("operand",)

    def __init__(self, op: str, operand: Any) -> None:
        super().__init__(op, operand)
        self.operand = operand

    def holds(self, value: Any) -> bool:
        operand = self.operand
        if type(operand) is str:  # the common case, without the general comparison
            return type(value) is str and value == operand
        return json_equal(value, operand)


class _Neq(_Eq):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return not _Eq.holds(self, value)


class _In(_Check):
    __slots__ = ("others", "scalars")

    def __init__(self, op: str, operand: list[Any]) -> None:
        super().__init__(op, operand)
        self.scalars = frozenset(k for v in operand if (k := _scalar_key(v)) is not None)
        self.others = tuple(v for v in operand if _scalar_key(v) is None)

    def holds(self, value: Any) -> bool:
        if value is MISSING:
            return False
        key = _scalar_key(value)
        if key is not None:
            return key in self.scalars
        return any(json_equal(value, other) for other in self.others)


class _Nin(_In):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return not _In.holds(self, value)


class _Order(_Check):
    """``$gt $gte $lt $lte``: numbers with numbers, strings with strings (``$gt`` here)."""

    __slots__ = ("operand", "types")

    def __init__(self, op: str, operand: Any) -> None:
        super().__init__(op, operand)
        self.operand = operand
        # The exact types compared: bool is not a number here, as in JSON.
        self.types: tuple[type, ...] = (str,) if isinstance(operand, str) else (int, float)

    def holds(self, value: Any) -> bool:
        return type(value) in self.types and bool(value > self.operand)


class _Gte(_Order):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return type(value) in self.types and bool(value >= self.operand)


class _Lt(_Order):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return type(value) in self.types and bool(value < self.operand)


class _Lte(_Order):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return type(value) in self.types and bool(value <= self.operand)


_ORDERS: Final[dict[str, type[_Order]]] = {"$gt": _Order, "$gte": _Gte, "$lt": _Lt, "$lte": _Lte}


class _Exists(_Check):
    __slots__ = ("wanted",)

    def __init__(self, op: str, operand: bool) -> None:
        super().__init__(op, operand)
        self.wanted = operand

    def holds(self, value: Any) -> bool:
        return (value is not MISSING) == self.wanted


class _Prefix(_Check):
    __slots__ = ("operand",)

    def __init__(self, op: str, operand: str) -> None:
        super().__init__(op, operand)
        self.operand = operand

    def holds(self, value: Any) -> bool:
        return type(value) is str and value.startswith(self.operand)


class _Suffix(_Prefix):
    __slots__ = ()

    def holds(self, value: Any) -> bool:
        return type(value) is str and value.endswith(self.operand)


class _Contains(_Eq):
    """A substring of a string (string operand), or an element of a list."""

    __slots__ = ()

    def holds(self, value: Any) -> bool:
        if type(value) is str:
            return type(self.operand) is str and self.operand in value
        if type(value) is list:
            return any(json_equal(item, self.operand) for item in value)
        return False


# -- nodes: clauses and their combinations -------------------------------------------

Headers = Mapping[str, str]


class Node:
    """A compiled clause: ``matches`` for fan-out, ``why_not`` for the filter-test route."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def matches(self, body: Any, headers: Headers) -> bool:
        raise NotImplementedError

    def why_not(self, body: Any, headers: Headers) -> str | None:
        """Why this clause fails for the event (the first failing part), or None if it holds."""
        raise NotImplementedError


class _Field(Node):
    """Checks on one field of the body, found by its path."""

    __slots__ = ("checks", "keys")

    def __init__(self, where: str, keys: tuple[tuple[str, int], ...], checks: list[_Check]) -> None:
        super().__init__(where)
        self.keys = keys  # (key, list index or -1)
        self.checks = tuple(checks)

    def value(self, body: Any, headers: Headers) -> Any:
        for key, index in self.keys:
            if type(body) is dict:
                body = body.get(key, MISSING)
            elif type(body) is list and 0 <= index < len(body):
                body = body[index]
            else:
                return MISSING
        return body

    # Loops rather than all()/any() over a generator: this is the per-event
    # path, and a generator costs more than the check it runs.
    def matches(self, body: Any, headers: Headers) -> bool:
        value = self.value(body, headers)
        for check in self.checks:  # noqa: SIM110
            if not check.holds(value):
                return False
        return True

    def why_not(self, body: Any, headers: Headers) -> str | None:
        value = self.value(body, headers)
        for check in self.checks:
            if not check.holds(value):
                return f"{self.where}: {_show(value)} does not satisfy {check.text}"
        return None


class _Header(_Field):
    """Checks on one request header (names are lower-case, as the HTTP parser keeps them)."""

    __slots__ = ("name",)

    def __init__(self, where: str, name: str, checks: list[_Check]) -> None:
        super().__init__(where, (), checks)
        self.name = name.lower()

    def value(self, body: Any, headers: Headers) -> Any:
        return headers.get(self.name, MISSING)


class _All(Node):
    __slots__ = ("nodes",)

    def __init__(self, where: str, nodes: list[Node]) -> None:
        super().__init__(where)
        self.nodes = tuple(nodes)

    def matches(self, body: Any, headers: Headers) -> bool:
        for node in self.nodes:  # noqa: SIM110 (a loop: no generator per event)
            if not node.matches(body, headers):
                return False
        return True

    def why_not(self, body: Any, headers: Headers) -> str | None:
        for node in self.nodes:
            reason = node.why_not(body, headers)
            if reason is not None:
                return reason
        return None


class _Any(_All):
    __slots__ = ()

    def matches(self, body: Any, headers: Headers) -> bool:
        for node in self.nodes:  # noqa: SIM110 (a loop: no generator per event)
            if node.matches(body, headers):
                return True
        return False

    def why_not(self, body: Any, headers: Headers) -> str | None:
        reasons = []
        for node in self.nodes:
            reason = node.why_not(body, headers)
            if reason is None:
                return None
            reasons.append(reason)
        return f"{self.where}: no alternative holds ({'; '.join(reasons)})"


class _Not(Node):
    __slots__ = ("node",)

    def __init__(self, where: str, node: Node) -> None:
        super().__init__(where)
        self.node = node

    def matches(self, body: Any, headers: Headers) -> bool:
        return not self.node.matches(body, headers)

    def why_not(self, body: Any, headers: Headers) -> str | None:
        if self.node.matches(body, headers):
            return f"{self.where}: the negated filter matches"
        return None


class Filter:
    """A compiled filter. Equal filters (same document) compare equal."""

    __slots__ = ("doc", "nodes", "paths", "root", "text")

    def __init__(
        self, doc: Mapping[str, Any], root: Node, nodes: int, paths: tuple[tuple[str, ...], ...]
    ) -> None:
        self.doc = doc
        self.root = root
        self.nodes = nodes
        self.paths = paths  # the body paths it reads (``Projection``)
        self.text = msgspec.json.encode(doc, order="sorted")

    def matches(self, body: Any, headers: Headers) -> bool:
        """Whether an event (its parsed body, or ``MISSING``, and headers) passes."""
        return self.root.matches(body, headers)

    def why_not(self, body: Any, headers: Headers) -> str | None:
        """The first clause the event fails, said in a sentence; None when it matches."""
        return self.root.why_not(body, headers)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"<Filter {self.text.decode()[:_SHOWN_CHARS]}>"


def filter_endpoints(
    filters: Mapping[str, Filter],
    endpoint_ids: Sequence[str],
    body: bytes,
    headers: Headers,
    *,
    document: Any = NOT_PARSED,
    parse: Callable[[bytes], Any] = parse_body,
) -> tuple[str, ...]:
    """The endpoints whose filter (if any) the event passes.

    The body is parsed (by ``parse``) once, and only when one of
    ``endpoint_ids`` has a filter; a caller holding the parsed body already
    passes it as ``document``.
    """
    kept: list[str] = []
    parsed = document
    for endpoint_id in endpoint_ids:
        flt = filters.get(endpoint_id)
        if flt is not None:
            if parsed is NOT_PARSED:
                parsed = parse(body)
            if not flt.matches(parsed, headers):
                continue
        kept.append(endpoint_id)
    return tuple(kept)


# -- decoding only what filters read ----------------------------------------------


class _Shape:
    """One object level of a projection: its struct type and how to turn it into a dict."""

    __slots__ = ("fields", "struct")

    def __init__(self, tree: dict[str, Any], name: str) -> None:
        fields: list[tuple[str, Any, Any]] = []
        plan: list[tuple[str, str, _Shape | None]] = []
        for index, (key, sub) in enumerate(sorted(tree.items())):
            attr = f"f{index}"
            shape = None if sub is None else _Shape(sub, f"{name}_{index}")
            fields.append((attr, Any if shape is None else shape.struct | None, msgspec.UNSET))
            plan.append((attr, key, shape))
        rename = {attr: key for attr, key, _ in plan}
        self.struct: Any = msgspec.defstruct(name, fields, rename=rename)
        self.fields = tuple(plan)

    def as_dict(self, obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key, shape in self.fields:
            value = getattr(obj, attr)
            if value is msgspec.UNSET:
                continue
            out[key] = value if shape is None or value is None else shape.as_dict(value)
        return out


class Projection:
    """Parses an event body into only the parts some filters read.

    Decoding a body whole builds every object and string in it; with a
    struct type naming only the filters' paths, the decoder skips the rest
    without building it. The result is the same dict tree the filters walk,
    cut to those paths. A body of another shape than the paths assume (a
    path through a string, a list, a top level that is no object) is parsed
    whole instead, so the filters see exactly what they would have.
    """

    __slots__ = ("_decoder", "_shape")

    def __init__(self, filters: Iterable[Filter]) -> None:
        tree: dict[str, Any] = {}
        for flt in filters:
            for keys in flt.paths:
                _add_path(tree, keys)
        self._shape = _Shape(tree, "Projected")
        self._decoder = msgspec.json.Decoder(self._shape.struct) if tree else None

    def parse(self, body: bytes) -> Any:
        if self._decoder is None:  # the filters read headers only
            return MISSING
        try:
            return self._shape.as_dict(self._decoder.decode(body))
        except msgspec.ValidationError:
            return parse_body(body)
        except (msgspec.DecodeError, RecursionError):
            return MISSING


def _add_path(tree: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Mark ``keys`` as read; ``None`` stands for a value decoded whole.

    A key of digits may index a list, so the value holding it is decoded whole.
    """
    node = tree
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1 or keys[depth + 1].isdigit()
        if last:
            node[key] = None
            return
        sub = node.get(key, {})
        if sub is None:  # already decoded whole for another path
            return
        node[key] = sub
        node = sub


# -- compiling ---------------------------------------------------------------------------


def parse_filter(doc: Any) -> Filter:
    """Compile a filter document; raises ``FilterError`` naming every bad part by its path."""
    compiler = _Compiler()
    if not isinstance(doc, Mapping):
        raise FilterError([("", f"a filter must be an object, not {_kind(doc)}")])
    root = compiler.filter(doc, "", 1)
    if compiler.nodes > MAX_NODES:
        compiler.problem("", f"has {compiler.nodes} nodes; at most {MAX_NODES} are allowed")
    if compiler.issues:
        raise FilterError(compiler.issues)
    return Filter(doc, root, compiler.nodes, tuple(compiler.paths))


def _join(where: str, key: str) -> str:
    """A path inside the filter: ``.key``, or ``["a.b"]`` for a key holding dots."""
    simple = key and "." not in key and "[" not in key and '"' not in key
    part = key if simple else msgspec.json.encode(key).decode().join("[]")
    if not simple:
        return where + part
    return f"{where}.{part}" if where else part


class _Compiler:
    def __init__(self) -> None:
        self.issues: list[tuple[str, str]] = []
        self.nodes = 0
        self.paths: list[tuple[str, ...]] = []

    def problem(self, where: str, message: str) -> None:
        self.issues.append((where, message))

    def counted(self) -> bool:
        """Count one node; False (stop descending) once far past the limit."""
        self.nodes += 1
        return self.nodes <= MAX_NODES

    def filter(self, doc: Mapping[str, Any], where: str, depth: int) -> Node:
        if depth > MAX_DEPTH:
            self.problem(where, f"nests deeper than {MAX_DEPTH} filters")
            return _All(where, [])
        nodes = []
        for key, value in doc.items():
            at = _join(where, str(key))
            if not isinstance(key, str) or not self.counted():
                continue
            if key in {"$and", "$or"}:
                nodes.append(self.logical(key, value, at, depth))
            elif key == "$not":
                if isinstance(value, Mapping):
                    nodes.append(_Not(at, self.filter(value, at, depth + 1)))
                else:
                    self.problem(at, f"must be a filter object, not {_kind(value)}")
            elif key == "$headers":
                nodes.extend(self.headers(value, at))
            elif key.startswith("$"):
                self.problem(at, _unknown(key, "where a field path or $and, $or, $not, $headers"))
            else:
                keys = self.path(key, at)
                self.paths.append(tuple(k for k, _ in keys))
                nodes.append(_Field(at, keys, self.condition(value, at)))
        return nodes[0] if len(nodes) == 1 else _All(where, nodes)

    def logical(self, op: str, value: Any, where: str, depth: int) -> Node:
        if not isinstance(value, list) or not value:
            self.problem(where, "must be a non-empty list of filter objects")
            return _All(where, [])
        if len(value) > MAX_LIST:
            self.problem(where, f"has {len(value)} items; at most {MAX_LIST} are allowed")
            return _All(where, [])
        nodes = []
        for index, item in enumerate(value):
            at = f"{where}[{index}]"
            if isinstance(item, Mapping):
                nodes.append(self.filter(item, at, depth + 1))
            else:
                self.problem(at, f"must be a filter object, not {_kind(item)}")
        return _All(where, nodes) if op == "$and" else _Any(where, nodes)

    def headers(self, value: Any, where: str) -> list[Node]:
        if not isinstance(value, Mapping):
            self.problem(where, f"must be an object of header names, not {_kind(value)}")
            return []
        nodes: list[Node] = []
        for name, condition in value.items():
            at = _join(where, str(name))
            if not self.counted():
                continue
            if not name or len(name) > MAX_STRING or name.startswith("$"):
                self.problem(at, "must be a header name")
                continue
            nodes.append(_Header(at, name, self.condition(condition, at)))
        return nodes

    def path(self, key: str, where: str) -> tuple[tuple[str, int], ...]:
        parts = key.split(".")
        if len(key) > MAX_STRING or len(parts) > MAX_PATH_KEYS:
            self.problem(where, f"a path has at most {MAX_PATH_KEYS} keys of {MAX_STRING} chars")
        elif "" in parts:
            self.problem(where, "a path's keys must not be empty (no leading, trailing or '..')")
        return tuple((p, int(p) if p.isdigit() and p.isascii() else -1) for p in parts)

    def condition(self, value: Any, where: str) -> list[_Check]:
        if not isinstance(value, Mapping) or not any(str(k).startswith("$") for k in value):
            self.literal(value, where)
            return [_Eq("$eq", value)]
        checks = []
        for op, operand in value.items():
            at = _join(where, str(op))
            if not self.counted():
                continue
            check = self.check(str(op), operand, at)
            if check is not None:
                checks.append(check)
        return checks

    def check(self, op: str, operand: Any, where: str) -> _Check | None:
        if op in {"$eq", "$neq", "$contains"}:
            self.literal(operand, where)
            return {"$eq": _Eq, "$neq": _Neq, "$contains": _Contains}[op](op, operand)
        if op in {"$in", "$nin"}:
            if not isinstance(operand, list):
                self.problem(where, f"must be a list, not {_kind(operand)}")
                return None
            if len(operand) > MAX_LIST:
                self.problem(where, f"has {len(operand)} items; at most {MAX_LIST} are allowed")
                return None
            self.literal(operand, where)
            return (_In if op == "$in" else _Nin)(op, operand)
        if op in {"$gt", "$gte", "$lt", "$lte"}:
            if _kind(operand) not in {"number", "string"}:
                self.problem(where, f"must be a number or a string, not {_kind(operand)}")
                return None
            self.literal(operand, where)
            return _ORDERS[op](op, operand)
        if op == "$exists":
            if not isinstance(operand, bool):
                self.problem(where, f"must be true or false, not {_kind(operand)}")
                return None
            return _Exists(op, operand)
        if op in {"$prefix", "$suffix"}:
            if not isinstance(operand, str):
                self.problem(where, f"must be a string, not {_kind(operand)}")
                return None
            self.literal(operand, where)
            return (_Prefix if op == "$prefix" else _Suffix)(op, operand)
        what = "an operator here (a condition's keys are all operators or none is)"
        self.problem(where, _unknown(op, what) if op.startswith("$") else f"{op!r} is not {what}")
        return None

    def literal(self, value: Any, where: str) -> None:
        """Count a literal's values against ``MAX_NODES``; bound its strings and lists."""
        stack = [value]
        while stack:
            item = stack.pop()
            if not self.counted():
                return
            kind = _kind(item)
            if kind == "string" and len(item) > MAX_STRING:
                self.problem(where, f"a string is longer than {MAX_STRING} characters")
            elif kind == "array":
                stack.extend(item)
            elif kind == "object":
                for key, nested in item.items():
                    if len(key) > MAX_STRING:
                        self.problem(where, f"a key is longer than {MAX_STRING} characters")
                    stack.append(nested)
            elif kind == "other":
                self.problem(where, f"{type(item).__name__} is not a JSON value")
            elif isinstance(item, float) and not math.isfinite(item):
                self.problem(where, f"{item} is not a JSON number")


def _unknown(op: str, where: str) -> str:
    known = ", ".join((*OPERATORS, *LOGICAL))
    return f"unknown operator {op} ({where}; known: {known}; no regular expressions)"
