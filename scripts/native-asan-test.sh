#!/usr/bin/env bash
# Build the native transport with AddressSanitizer and run tests/native on it.
#
# The ASan build goes into a temporary copy of the package (put first on
# PYTHONPATH), so the regular in-place build other processes use is left alone.
# libasan must be loaded before the (un-instrumented) Python binary starts, so
# it is LD_PRELOADed; leak detection is off because CPython itself keeps
# allocations alive at exit -- our own leak check is the resource counters the
# tests assert return to zero (connections, send chunks, buffers, engines).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
CC="${CC:-gcc}"
if [[ "$(uname -s)" != Linux ]]; then
    echo "native-asan-test: not Linux, nothing to do"; exit 0
fi
LIBASAN="$($CC -print-file-name=libasan.so)"
if [[ ! -e "$LIBASAN" ]]; then
    echo "native-asan-test: libasan not found for $CC" >&2; exit 1
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cp -r src/hookrouter "$TMP/"
rm -f "$TMP"/hookrouter/_native/_engine*.so "$TMP"/hookrouter/_native/_http1*.so \
    "$TMP"/hookrouter/_native/_hmac*.so
INC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
CFLAGS=(-shared -fPIC -std=gnu11 -O1 -g -fsanitize=address -fno-omit-frame-pointer
    -DHR_DEBUG=1 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -I"$INC")
# The modules as setup.py builds them: the transport, the HTTP/1.1 fast path, HMAC.
ENGINE_SOURCES=()
for source in src/hookrouter/_native/*.c; do
    case "$(basename "$source")" in
        http1_head.c | hmac_sha256.c) ;;
        *) ENGINE_SOURCES+=("$source") ;;
    esac
done
"$CC" "${CFLAGS[@]}" "${ENGINE_SOURCES[@]}" -o "$TMP/hookrouter/_native/_engine$SUFFIX"
"$CC" "${CFLAGS[@]}" src/hookrouter/_native/http1_head.c -o "$TMP/hookrouter/_native/_http1$SUFFIX"
"$CC" "${CFLAGS[@]}" src/hookrouter/_native/hmac_sha256.c -lcrypto \
    -o "$TMP/hookrouter/_native/_hmac$SUFFIX"
export LD_PRELOAD="$LIBASAN"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:strict_string_checks=1"
export PYTHONPATH="$TMP${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYEOF'
from hookrouter._native import engine, IMPORT_ERROR
from hookrouter._native.accel import http1, hmac, HTTP1_IMPORT_ERROR, HMAC_IMPORT_ERROR
assert engine is not None, IMPORT_ERROR
assert http1 is not None, HTTP1_IMPORT_ERROR
assert hmac is not None, HMAC_IMPORT_ERROR
assert engine.DEBUG_BUILD and "/tmp" in engine.__file__, engine.__file__
for module in (http1, hmac):
    assert "/tmp" in module.__file__, module.__file__
print("native-asan-test: using", engine.__file__, http1.__file__, hmac.__file__)
PYEOF
"$PY" -m pytest tests/native tests/core/test_http1_fast.py tests/verify/test_hmac_key.py \
    -q -p no:cacheprovider "$@"
