"""Provider name -> verifier, and the config checks for a source's secrets/options.

``validate_source_options`` returns every problem at once as (relative key
path, message) pairs -- ``secrets[1]``, ``hmac.algorithm``, ``github.foo`` --
so the config loader can prefix its own path (``sources[3].``) and show them
all. ``build_verifier`` runs the same checks and raises ``ConfigError``
rather than building a verifier that could never succeed.

Provider options live under a table named after the provider; only
``github`` (``append_action``, a bool) and ``hmac`` (see ``generic``) have any.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hookrouter.errors import ConfigError, ConfigIssue
from hookrouter.verify.base import Verifier
from hookrouter.verify.generic import GenericHmacVerifier, option_issues, parse_options
from hookrouter.verify.github import GitHubVerifier
from hookrouter.verify.shopify import ShopifyVerifier
from hookrouter.verify.slack import SlackVerifier
from hookrouter.verify.standard import StandardVerifier, decode_secret
from hookrouter.verify.stripe import StripeVerifier

PROVIDERS: frozenset[str] = frozenset({"stripe", "github", "shopify", "slack", "standard", "hmac"})

# Prefixes of Stripe API keys (secret, restricted, publishable): pasting one
# where the webhook signing secret (whsec_...) belongs is a classic mistake
# that otherwise shows up only as every request failing bad_signature.
_STRIPE_API_KEY_PREFIXES = ("sk_", "rk_", "pk_")


def _github_issues(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    issues = []
    for key, value in options.items():
        if key != "append_action":
            issues.append((key, "unknown option"))
        elif not isinstance(value, bool):
            issues.append((key, "must be true or false"))
    return issues


def _no_options(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(key, "unknown option") for key in options]


_OPTION_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[tuple[str, str]]]] = {
    "stripe": _no_options,
    "github": _github_issues,
    "shopify": _no_options,
    "slack": _no_options,
    "standard": _no_options,
    "hmac": option_issues,
}


def secret_issue(provider: str, secret: object) -> str | None:
    """What is wrong with one of a source's ``secrets`` for ``provider``; None if nothing."""
    if not isinstance(secret, str):
        return "must be a string"
    if not secret:
        return "must not be empty"
    if secret != secret.strip():
        return "has leading or trailing whitespace (a copy-paste slip?); it would never match"
    if provider == "standard":
        try:
            decode_secret(secret)
        except ValueError as exc:
            return str(exc)
    if provider == "stripe" and secret.startswith(_STRIPE_API_KEY_PREFIXES):
        return "looks like a Stripe API key; use the endpoint's signing secret (whsec_...)"
    return None


def validate_source_options(
    provider: str, secrets: Sequence[str], options: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """Every problem with a source's provider, secrets and options; [] when fine."""
    if provider not in PROVIDERS:
        return [("provider", f"unknown provider {provider!r}; use one of {sorted(PROVIDERS)}")]
    issues: list[tuple[str, str]] = []
    if isinstance(secrets, str) or not isinstance(secrets, Sequence):
        issues.append(("secrets", "must be a list of secrets"))
    elif not secrets:
        issues.append(("secrets", "at least one secret is required"))
    else:
        for i, secret in enumerate(secrets):
            if (msg := secret_issue(provider, secret)) is not None:
                issues.append((f"secrets[{i}]", msg))
    if not isinstance(options, Mapping):
        issues.append((provider, "must be a table of options"))
    else:
        issues.extend((f"{provider}.{key}", msg) for key, msg in _OPTION_CHECKS[provider](options))
    return issues


def build_verifier(
    provider: str,
    secrets: Sequence[str],
    tolerance_seconds: int,
    options: Mapping[str, Any],
    *,
    checked: bool = False,
) -> Verifier:
    """The verifier for one source; ``ConfigError`` listing every issue if invalid.

    ``tolerance_seconds`` bounds |now - signed timestamp| for the schemes that
    sign one (stripe, slack, standard, hmac with ``timestamp_header``); 0
    disables that check. ``checked``: the values come from a parsed
    ``SourceConfig``, whose parser ran ``validate_source_options`` already
    (the catalog builds verifiers lazily, on a source's first request).
    """
    issues = [] if checked else validate_source_options(provider, secrets, options)
    if isinstance(tolerance_seconds, bool) or not isinstance(tolerance_seconds, int):
        issues.append(("tolerance_seconds", "must be an integer number of seconds"))
    elif tolerance_seconds < 0:
        issues.append(("tolerance_seconds", "must not be negative (0 disables the check)"))
    if issues:
        raise ConfigError([ConfigIssue(path, message) for path, message in issues])
    if provider == "stripe":
        return StripeVerifier(secrets, tolerance_seconds)
    if provider == "github":
        return GitHubVerifier(secrets, append_action=bool(options.get("append_action", True)))
    if provider == "shopify":
        return ShopifyVerifier(secrets)
    if provider == "slack":
        return SlackVerifier(secrets, tolerance_seconds)
    if provider == "standard":
        return StandardVerifier(secrets, tolerance_seconds)
    return GenericHmacVerifier(secrets, tolerance_seconds, parse_options(options))
