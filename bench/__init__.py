"""hookrouter's benchmark harness (on demand; never part of the test suite).

``python -m bench all`` runs every scenario and writes docs/benchmarks.md;
``python -m bench <scenario> [--quick]`` runs one. Scenarios are plug-ins:
see :mod:`bench.api` for the interface and :mod:`bench.scenarios` for how
they are found.
"""
