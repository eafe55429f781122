"""Whatever arrives, a verifier either returns a VerifiedEvent or raises VerificationFailed.

Three generators per provider: arbitrary headers and bodies; the provider's
own header names with garbage values; and correctly signed garbage bodies,
which reach the id/type parsing that runs only after a signature matches.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.verify_signers import NOW, OPTIONS, SECRETS, SIGNERS

from hookrouter.errors import VerificationFailed
from hookrouter.verify import PROVIDERS, REASONS, VerifiedEvent, build_verifier

VERIFIERS = {p: build_verifier(p, SECRETS[p], 300, OPTIONS.get(p, {})) for p in PROVIDERS}
HEADER_NAMES = sorted(
    {name for p in PROVIDERS for name in SIGNERS[p](SECRETS[p][0], b"{}", NOW)}
    | {"x-shopify-event-id", "x-hub-signature", "svix-signature", "svix-id", "svix-timestamp"}
)
# database=None: no .hypothesis/ directory in the shared working tree; failures print their example.
SETTINGS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# Header values: mostly printable ASCII, with latin-1 and beyond mixed in.
values = st.one_of(
    st.text(alphabet=st.characters(codec="latin-1"), max_size=80),
    st.text(max_size=40),
    st.from_regex(r"(t=\d{0,12},)?(v[01]|sha256)[=,][0-9a-fA-F+/=]{0,90}", fullmatch=True),
    st.integers(min_value=-(10**13), max_value=10**16).map(str),
)
bodies = st.one_of(
    st.binary(max_size=300),
    st.from_regex(
        rb'\{"(id|type|event_id|event|action|data|challenge)": ?.{0,40}\}', fullmatch=True
    ),
    st.just(b"payload=%7B%22type%22%3A5%7D"),
    st.just(b'{"type":"url_verification","challenge":{"a":1}}'),
    st.just(b'{"event": "x", "type": null, "data": [1, 2]}'),
)


def check(provider: str, headers: dict[str, str], body: bytes, now: float) -> None:
    try:
        result = VERIFIERS[provider].verify(headers, body, now)
    except VerificationFailed as exc:
        assert exc.reason in REASONS
    else:
        assert isinstance(result, VerifiedEvent)
        for value in (result.provider_event_id, result.event_type):
            assert value is None or (isinstance(value, str) and value)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@SETTINGS
@given(
    headers=st.dictionaries(st.one_of(st.sampled_from(HEADER_NAMES), st.text(max_size=10)), values),
    body=bodies,
    now=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
)
def test_garbage_only_ever_fails_verification(provider, headers, body, now):
    check(provider, headers, body, now)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@SETTINGS
@given(body=bodies, data=st.data())
def test_signed_garbage_bodies_verify_and_parse_safely(provider, body, data):
    if provider in ("stripe", "standard"):
        # Those signers go through str: the SDKs only take UTF-8 text bodies.
        body = body.decode("utf-8", "replace").encode("utf-8")
    headers = SIGNERS[provider](SECRETS[provider][1], body, NOW)
    # Sometimes add unrelated noise headers, never touching the signed ones.
    noise = data.draw(st.dictionaries(st.sampled_from(HEADER_NAMES), values, max_size=3))
    headers = {**noise, **headers}
    result = VERIFIERS[provider].verify(headers, body, NOW)
    assert isinstance(result, VerifiedEvent)
