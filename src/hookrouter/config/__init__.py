"""Configuration: TOML (or an admin API document) in, validated typed values out.

Sits below store, delivery and ingress, which consume its values and never
parse text themselves: ``loader`` (the whole file), one module per section
(``server``, ``delivery``, ``store``), ``entities`` (tenants, sources,
endpoints), ``durations`` (durations and retry schedules), ``reader`` (typed
reading with key paths) and ``catalog`` (the live, indexed entity view).
"""

from hookrouter.config.loader import Config, load_config, parse_config

__all__ = ["Config", "load_config", "parse_config"]
