"""The operator console (``/console``) and the tenant portal (``/portal``): HTML over the admin API.

Server-rendered pages (Jinja2, autoescaped) with one small script of our
own for live refresh; served by the router's HTTP core on the admin
listener. See docs/console.md.
"""
