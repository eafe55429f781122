"""The admin API and the services behind it (the top of the house but for runtime and cli).

``api`` dispatches ``/admin/v1`` requests; ``entities`` is the validated CRUD
over stored tenants, sources and endpoints; ``delivery_routes`` and
``retention_routes`` add the routes of the delivery engine and the retention
pruner; ``replay_cli`` is ``hookrouter replay``, a client of those routes.
This package imports ingress, delivery and store; none of them imports it.
"""
