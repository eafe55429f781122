"""The admin API's request and response bodies, as msgspec structs.

The routes decode query strings and bodies with these types and encode their
answers from them; ``admin.openapi`` turns the same types into the JSON
Schemas of the OpenAPI document, so the document cannot describe anything
the routes do not do.

Entity documents (tenants, sources, endpoints) are validated by the config
parsers (``config.entities``), which report every problem with its key path;
their structs here state the shape, and the routes check an accepted
document against it too (``check_shape``), so a field the parsers learn
without the struct is refused rather than silently undocumented.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from hookrouter.admin.operations import validation_error
from hookrouter.admin.paging import DEFAULT_PAGE, MAX_PAGE
from hookrouter.errors import ConfigError, ConfigIssue
from hookrouter.store.base import DeliveryState, EventStatus

Name = Annotated[
    str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="letters, digits, _ . -")
]
Seconds = Annotated[float, Meta(description="Unix seconds")]


class Issue(Struct):
    path: str
    message: str


class ErrorBody(Struct, omit_defaults=True):
    """Every error: a stable reason code and a human sentence."""

    error: str
    message: str
    issues: list[Issue] | None = None  # 422: one per invalid field


# -- entities -------------------------------------------------------------------


class RateLimit(Struct, forbid_unknown_fields=True):
    capacity: float
    refill_per_second: float


Durations = Annotated[list[str], Meta(description='durations such as ["5s", "5m"]')]
ReplayWindow = Annotated[
    str | int,
    Meta(description='replay guard window such as "1h"; "0" (or 0) turns the guard off'),
]


class Tenant(Struct, omit_defaults=True):
    id: Name
    queue_capacity: int | None = None
    max_in_flight: int | None = None
    max_backlog: int | None = None
    rate_limit: RateLimit | None = None
    retry_schedule: Durations | None = None
    portal_origins: (
        Annotated[list[str], Meta(description="sites that may frame the tenant's portal")] | None
    ) = None


class Source(Struct, omit_defaults=True):
    """Provider options go in a table named after the provider (``"stripe": {...}``)."""

    id: Name
    tenant: Name
    provider: str
    secrets: list[str]
    tolerance_seconds: int | None = None
    rate_limit: RateLimit | None = None
    replay_window: ReplayWindow | None = None


EndpointFilter = Annotated[
    dict[str, Any],
    Meta(
        description="content filter on the event's JSON body and headers: "
        '{"data.object.amount": {"$gte": 1000}, "$headers": {"x-tier": "gold"}}; '
        "operators $eq $neq $in $nin $gt $gte $lt $lte $exists $prefix $suffix "
        "$contains $and $or $not (docs/admin-api.md, Content filters)"
    ),
]


class Endpoint(Struct, omit_defaults=True):
    id: Name
    tenant: Name
    url: str
    secret: str
    event_types: list[str] | None = None
    max_in_flight: int | None = None
    retry_schedule: Durations | None = None
    rate_limit: RateLimit | None = None
    enabled: bool | None = None
    previous_secrets: list[str] | None = None
    headers: dict[str, str] | None = None
    filter: EndpointFilter | None = None


ENTITY_TYPES: dict[str, type[Struct]] = {"tenant": Tenant, "source": Source, "endpoint": Endpoint}


def put_body(entity: type[Struct]) -> type[Struct]:
    """The entity with an optional ``id`` (``PUT`` takes it from the URL)."""
    required: list[tuple[str, Any]] = []
    optional: list[tuple[str, Any, Any]] = [("id", Name | None, None)]
    for f in msgspec.structs.fields(entity):
        if f.name == "id":
            continue
        if f.required:
            required.append((f.name, f.type))
        else:
            optional.append((f.name, f.type, f.default))
    name = f"{entity.__name__}Put"
    return msgspec.defstruct(name, [*required, *optional], omit_defaults=True)


def patch_body(entity: type[Struct]) -> type[Struct]:
    """Every field optional; ``null`` removes a field."""
    fields = [(f.name, f.type | None, None) for f in msgspec.structs.fields(entity)]
    return msgspec.defstruct(f"{entity.__name__}Patch", fields, omit_defaults=True)


def page_list_of(item: type[Any], name: str) -> type[Struct]:
    """``{"data": [item, ...], "next_after": id | null}``: one page of a list by id."""
    return msgspec.defstruct(
        name,
        [
            ("data", list[item]),  # type: ignore[valid-type]
            ("next_after", Annotated[str | None, Meta(description=_NEXT_AFTER)]),
        ],
    )


_NEXT_AFTER = "pass as ?after= for the next page; null on the last page"


class DeliveryQuery(Struct):
    tenant: Annotated[str, Meta(description="this tenant's stats only")] | UnsetType = UNSET
    limit: Annotated[
        int, Meta(ge=1, le=MAX_PAGE, description="tenants shown, the most work first")
    ] = DEFAULT_PAGE


class BreakersQuery(Struct):
    tripped: Annotated[bool, Meta(description="only breakers not closed")] = False
    tenant: Annotated[str, Meta(description="this tenant's endpoints only")] | UnsetType = UNSET
    after: Annotated[str, Meta(description="endpoint ids after this one")] | UnsetType = UNSET
    until: Annotated[str, Meta(description="endpoint ids up to this one")] | UnsetType = UNSET
    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE, description="breakers per page")] = DEFAULT_PAGE


# Query parameters are absent or given, never null: UNSET, so "null" stays a string.
class EntityListQuery(Struct):
    tenant: Annotated[str, Meta(description="only this tenant's")] | UnsetType = UNSET
    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE
    after: Annotated[str, Meta(description="id cursor (exclusive)")] | UnsetType = UNSET


def check_shape(kind: str, doc: dict[str, Any]) -> None:
    """Refuse a document the parsers accepted that its declared struct does not describe."""
    try:
        msgspec.convert(doc, ENTITY_TYPES[kind])
    except msgspec.ValidationError as exc:
        raise ConfigError([ConfigIssue(*validation_error(exc))]) from exc


# -- events ---------------------------------------------------------------------


# Query parameters are absent or given, never null: UNSET, so "null" stays a string.
class EventsQuery(Struct):
    tenant: str | UnsetType = UNSET
    status: EventStatus | UnsetType = UNSET
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    before: Annotated[str, Meta(description="event id cursor (exclusive)")] | UnsetType = UNSET


class EventQuery(Struct):
    body: Annotated[bool, Meta(description="include headers and body")] = False


class Attempt(Struct):
    attempt: int
    started_at: Seconds
    duration_ms: float
    status_code: int | None
    error: str | None
    response_excerpt: (
        Annotated[str, Meta(description="a failed answer's first bytes, as text")] | None
    ) = None


class Delivery(Struct):
    endpoint: str
    state: DeliveryState
    attempts: int
    next_attempt_at: Seconds | None
    last_status_code: int | None
    last_error: str | None
    history: list[Attempt]


class Event(Struct, omit_defaults=True):
    id: str
    tenant: str
    source: str
    provider_event_id: str | None
    type: str | None
    received_at: Seconds
    status: EventStatus
    deliveries: list[Delivery]
    headers: dict[str, str] | None = None  # with ?body=true
    body_base64: str | None = None


class EventPage(Struct):
    data: list[Event]
    next_before: str | None


# -- publish --------------------------------------------------------------------

MAX_PUBLISH_BATCH = 1000
EventType = Annotated[str, Meta(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")]
IdempotencyKey = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="the same key from the same tenant returns the first answer",
    ),
]
Labels = Annotated[
    dict[
        Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")],
        Annotated[str, Meta(max_length=256, pattern=r"^[\x20-\x7e]*$")],
    ],
    Meta(max_length=32, description="stored with the event (headers hookrouter-label-*)"),
]


class PublishEvent(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One event of the tenant's own application, fanned out like a received webhook."""

    type: EventType
    payload: Annotated[dict[str, Any], Meta(description="the JSON body receivers get")]
    tenant: Annotated[Name | None, Meta(description="required with the admin token")] = None
    labels: Labels | None = None


class PublishItem(Struct, forbid_unknown_fields=True, omit_defaults=True):
    type: EventType
    payload: dict[str, Any]
    labels: Labels | None = None
    idempotency_key: IdempotencyKey | None = None


class PublishBatch(Struct, forbid_unknown_fields=True, omit_defaults=True):
    events: Annotated[list[PublishItem], Meta(min_length=1, max_length=MAX_PUBLISH_BATCH)]
    tenant: Annotated[Name | None, Meta(description="required with the admin token")] = None


class Published(Struct):
    id: str
    tenant: str
    type: str


class PublishedItem(Struct, omit_defaults=True):
    """One batch item's answer: its own status, as a single publish would have answered."""

    status: int
    id: str | None = None
    replayed: bool = False  # the idempotency key's first answer, repeated
    error: str | None = None
    message: str | None = None


class PublishedBatch(Struct):
    tenant: str
    data: list[PublishedItem]


# -- filter test ----------------------------------------------------------------


class FilterTest(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A sample event to try an endpoint's routing on; nothing is stored or sent."""

    payload: Annotated[Any, Meta(description="the event's JSON body")] = None
    headers: Annotated[
        dict[str, str], Meta(description="request headers (names case-insensitive)")
    ] = msgspec.field(default_factory=dict)
    type: Annotated[
        str | None, Meta(description="the event type; omitted: event_types is not checked")
    ] = None
    filter: Annotated[
        EndpointFilter | None,
        Meta(description="a filter to try instead of the endpoint's own (a draft)"),
    ] = None


class FilterTestResult(Struct):
    matched: Annotated[bool, Meta(description="whether the endpoint would get a delivery")]
    reason: Annotated[
        str | None, Meta(description="why not: the first clause (or event_types) that failed")
    ]


# -- keys -----------------------------------------------------------------------


class KeyCreate(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(max_length=100)] | None = None


class KeyInfo(Struct):
    id: str
    tenant: str
    prefix: Annotated[str, Meta(description="the key's first characters, to recognise it")]
    name: str | None
    created_at: Seconds
    last_used_at: Annotated[Seconds | None, Meta(description="kept to within a minute")]


class KeyCreated(KeyInfo):
    key: Annotated[str, Meta(description="the secret key; shown this once only")]


class KeyList(Struct):
    data: list[KeyInfo]


# -- delivery and retention -----------------------------------------------------

ReplayState = Literal["dead", "disabled"]
MAX_REPLAY_BATCH = 10_000


class ReplayBody(Struct, forbid_unknown_fields=True):
    """Which dead (or disabled) deliveries to make pending again; the fields AND."""

    tenant: str | None = None
    endpoint: str | None = None
    event: str | None = None
    states: Annotated[list[ReplayState], Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["dead"]
    )
    since: Seconds | None = None
    until: Seconds | None = None
    limit: Annotated[int, Meta(ge=1, le=MAX_REPLAY_BATCH)] = 1000


class ReplayQuery(Struct):
    dry_run: bool = False


class ReplayResult(Struct, omit_defaults=True):
    matched: int | None = None  # dry run
    replayed: int | None = None


class BreakerReset(Struct):
    endpoint: str
    state: Literal["closed"]


class PortalLink(Struct):
    """A single-use sign-in link to one tenant's portal (``/portal``)."""

    url: Annotated[str, Meta(description="opens a portal session once, within expires_in")]
    tenant: str
    expires_in: Annotated[int, Meta(description="seconds the link stays valid")]


class Breakers(Struct):
    breakers: list[dict[str, Any]]
    next_after: Annotated[str | None, Meta(description=_NEXT_AFTER)] = None


_BREAKER_STATE = Meta(description="closed, open or half_open")


class BreakerChange(Struct):
    at: Seconds
    before: Annotated[str, _BREAKER_STATE]
    after: Annotated[str, _BREAKER_STATE]
    signal: Annotated[
        str,
        Meta(description="trip, cooldown_elapsed, probe_succeeded, probe_failed or reset"),
    ]


class EndpointHealth(Struct):
    """One endpoint's recent attempts (this node's delivery engine) and its breaker."""

    endpoint: str
    window_seconds: Annotated[
        float, Meta(description="how far back the figures reach (5 to 10 minutes)")
    ]
    attempts: int
    successes: int
    success_ratio: float | None
    p50_ms: Annotated[
        float | None,
        Meta(description="upper bound of the latency bucket of the median attempt"),
    ]
    p99_ms: Annotated[float | None, Meta(description="the same for the 99th percentile")]
    breaker: Annotated[str, _BREAKER_STATE]
    breaker_opened_at: Seconds | None
    breaker_times_opened: int
    breaker_history: Annotated[
        list[BreakerChange], Meta(description="the last state changes, newest first")
    ]


class RetentionRun(Struct):
    deleted: int


# A free-form object (counters, whose names are documented in docs/).
Stats = dict[str, Any]
