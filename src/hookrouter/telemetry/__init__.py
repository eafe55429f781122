"""How the router reports on itself: log setup, traces, the delivery lag series.

Sits between ``config`` (its settings) and ``store``: the ingest and delivery
paths import it, it imports neither of them.
"""
