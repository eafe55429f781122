"""The admin API and the services behind it (the top of the house but for runtime and cli).

``api`` dispatches ``/admin/v1`` requests; ``entities`` is the validated CRUD
over stored tenants, sources and endpoints; ``delivery_routes`` and
``retention_routes`` add the routes of the delivery engine and the retention
pruner; ``publish`` the publish API (a tenant's own events, through the
store like received webhooks); ``throttle`` limits failed logins per client;
``cluster`` applies admin changes other cluster nodes stored and sends the
commands their owners apply (breaker resets); ``replay_cli`` is ``hookrouter
replay`` (calls made through ``hookrouter.client``, one layer up).
This package imports ingress, delivery and store; none of them imports it.
"""
