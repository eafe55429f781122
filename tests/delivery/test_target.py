"""``Target.parse``: its quick path for plain URLs agrees with ``urlsplit``'s."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookrouter.delivery.endpoints import Target

_PARTS = st.sampled_from(
    ["http", "https", "HTTP", "h", "", "://", ":", "/", "?", "#", "@", "[::1]", ".", "-", " ",
     "%2F", "a", "Z", "0", "08", "80", "443", "65535", "65536", "99999", "x.example",
     "127.0.0.1", "\t", "~", "=", "&"]
)  # fmt: skip


def _both(url: str) -> tuple[object, object]:
    """What ``parse`` and the standard library's split make of ``url`` (an error as its type)."""
    results: list[object] = []
    for parse in (Target.parse, Target._split):
        try:
            results.append(parse(url))
        except ValueError as exc:
            results.append(type(exc))
    return results[0], results[1]


@given(st.lists(_PARTS, max_size=12).map("".join))
def test_parse_agrees_with_urlsplit_on_any_string(tail: str) -> None:
    for url in (tail, "http://" + tail, "https://" + tail, "http://h" + tail):
        quick, standard = _both(url)
        assert quick == standard, url


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://127.0.0.1:9/hook", Target("http", "127.0.0.1", 9, "/hook")),
        ("https://x.example", Target("https", "x.example", 443, "/")),
        ("http://h/p?a=1&b=2", Target("http", "h", 80, "/p?a=1&b=2")),
        ("http://h/p?", Target("http", "h", 80, "/p")),
        ("http://H:08/p#f", Target("http", "h", 8, "/p")),
        ("http://[::1]:8080/p", Target("http", "::1", 8080, "/p")),
    ],
)
def test_parse_splits_the_usual_shapes(url: str, target: Target) -> None:
    assert Target.parse(url) == target
