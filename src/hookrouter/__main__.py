"""``python -m hookrouter`` is the same as the ``hookrouter`` console script."""

from hookrouter.cli import main

raise SystemExit(main())
