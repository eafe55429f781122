"""bench.mypyc_scan: generic lookups found in mypyc's generated C, per function."""

from __future__ import annotations

from bench.mypyc_scan import scan

# Shaped like mypyc 2.4 output (abridged): a globals lookup, a method call by
# name, an attribute read, and a plain dict read that is not a global.
GENERATED = """\
char CPyDef_clock___SystemClock___monotonic(PyObject *cpy_r_self) {
    cpy_r_r0 = CPyStatic_clock___globals;
    cpy_r_r1 = CPyStatics[4]; /* '_monotonic' */
    cpy_r_r2 = CPyDict_GetItem(cpy_r_r0, cpy_r_r1);
}
PyObject *CPyDef_handler___IngestApp____ingest(PyObject *cpy_r_self, PyObject *cpy_r_req) {
    cpy_r_r5 = CPyStatics[77]; /* 'check' */
    cpy_r_r6 = PyObject_VectorcallMethod(cpy_r_r5, cpy_r_r4, 9223372036854775810ULL, 0);
    cpy_r_r7 = CPyStatics[78]; /* 'tenant' */
    cpy_r_r8 = CPyObject_GetAttr(cpy_r_live, cpy_r_r7);
    cpy_r_r9 = CPyStatics[78]; /* 'tenant' */
    cpy_r_r10 = CPyObject_GetAttr(cpy_r_live, cpy_r_r9);
    cpy_r_r11 = CPyStatics[79]; /* 'content-length' */
    cpy_r_r12 = CPyDict_GetItem(cpy_r_headers, cpy_r_r11);
}
"""


def test_lists_each_kind_of_generic_lookup_per_function() -> None:
    found = scan(GENERATED.splitlines())
    assert dict(found["CPyDef_clock___SystemClock___monotonic"]) == {"global _monotonic": 1}
    assert dict(found["CPyDef_handler___IngestApp____ingest"]) == {
        "method check": 1,
        "attr tenant": 2,
    }  # the headers dict read with a constant key is not a global lookup


def test_a_native_function_with_no_generic_lookup_is_not_listed() -> None:
    native = "double CPyDef_m___f(double cpy_r_x) {\n    return cpy_r_x * 2.0;\n}\n"
    assert scan(native.splitlines()) == {}
