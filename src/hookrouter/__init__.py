"""hookrouter: a multi-tenant webhook router.

Providers post events to ``/in/{source_id}``; hookrouter verifies the
signature, commits the event durably, answers 2xx, and fans it out to the
tenant's endpoints with per-tenant isolation.
"""

__version__ = "0.1.0"
