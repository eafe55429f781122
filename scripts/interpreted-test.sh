#!/usr/bin/env bash
# Run the test suite on the interpreted package: the same source without the
# mypyc-compiled modules, as a user gets it when the compile fails or is
# switched off (HOOKROUTER_COMPILE=0). The copy goes into a temporary
# directory put first on PYTHONPATH (routers the tests start inherit it), so
# the regular compiled build is left alone. The C transport stays.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -c 'import sys, pathlib, hookrouter.buildinfo as b; b.interpreted_copy(pathlib.Path(sys.argv[1]))' "$TMP"
export PYTHONPATH="$TMP${PYTHONPATH:+:$PYTHONPATH}"
export HOOKROUTER_COMPILE=0  # tells tests/test_buildinfo.py not to expect compiled modules
"$PY" - <<'PYEOF'
import hookrouter.core.http1 as m
from hookrouter.buildinfo import compiled_status
assert m.__file__.endswith(".py") and "/tmp" in m.__file__, m.__file__
print("interpreted-test: using", m.__file__, "-", compiled_status().summary())
PYEOF
"$PY" -m pytest -q -p no:cacheprovider "$@"
