/*
 * hookrouter._native._hmac: HMAC-SHA256 (RFC 2104) over a message given in
 * parts, from a precomputed key state.
 *
 * Theory of operation
 * -------------------
 * Every event is verified once (the provider's signature) and signed once
 * (the outbound Standard Webhooks signature), each an HMAC-SHA256 of ~1 KiB.
 * Through hashlib that is two EVP_MD_CTX copies, two digests (which copy
 * again) and five method calls, mostly OpenSSL 3's provider bookkeeping
 * (allocations, locks), not hashing. OpenSSL's plain SHA256_CTX -- a struct
 * copied by value, the same SHA-NI/AVX code underneath -- skips that
 * bookkeeping (figures: docs/performance.md).
 *
 * ``key_state(key)`` hashes the padded key once and returns both partial
 * states as an opaque bytes object; ``digest(state, parts)`` copies them,
 * feeds every part and returns the 32-byte MAC. The state is as secret as
 * the key: callers keep it where they would keep the key.
 *
 * The SHA256_* functions are deprecated in OpenSSL 3 in favour of EVP, which
 * is exactly the overhead avoided here; they remain part of its API.
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>

#include <openssl/sha.h>
#include <string.h>

typedef struct {
    SHA256_CTX inner; /* after the key XOR ipad block */
    SHA256_CTX outer; /* after the key XOR opad block */
} key_state_t;

/* key_state(key: bytes) -> bytes */
static PyObject *key_state(PyObject *module, PyObject *arg)
{
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    unsigned char block[SHA256_CBLOCK];
    memset(block, 0, sizeof block);
    if ((size_t)key.len > sizeof block) /* a long key is replaced by its hash */
        SHA256((const unsigned char *)key.buf, (size_t)key.len, block);
    else
        memcpy(block, key.buf, (size_t)key.len);
    PyBuffer_Release(&key);

    key_state_t state;
    unsigned char pad[SHA256_CBLOCK];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = block[i] ^ 0x36;
    SHA256_Init(&state.inner);
    SHA256_Update(&state.inner, pad, sizeof pad);
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = block[i] ^ 0x5c;
    SHA256_Init(&state.outer);
    SHA256_Update(&state.outer, pad, sizeof pad);
    PyObject *out = PyBytes_FromStringAndSize((const char *)&state, sizeof state);
    memset(block, 0, sizeof block); /* key material off the stack */
    memset(pad, 0, sizeof pad);
    memset(&state, 0, sizeof state);
    return out;
}

/* digest(state: bytes, parts: tuple | list of bytes-like) -> bytes (32) */
static PyObject *digest(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) ||
        PyBytes_GET_SIZE(args[0]) != (Py_ssize_t)sizeof(key_state_t)) {
        PyErr_SetString(PyExc_TypeError, "digest(state from key_state(), parts)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "parts must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    key_state_t state;
    memcpy(&state, PyBytes_AS_STRING(args[0]), sizeof state);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *part = items[i];
        if (PyBytes_Check(part)) {
            SHA256_Update(&state.inner, PyBytes_AS_STRING(part), (size_t)PyBytes_GET_SIZE(part));
            continue;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(part, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(seq);
            memset(&state, 0, sizeof state);
            return NULL;
        }
        SHA256_Update(&state.inner, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    Py_DECREF(seq);
    unsigned char inner[SHA256_DIGEST_LENGTH], mac[SHA256_DIGEST_LENGTH];
    SHA256_Final(inner, &state.inner);
    SHA256_Update(&state.outer, inner, sizeof inner);
    SHA256_Final(mac, &state.outer);
    memset(&state, 0, sizeof state);
    return PyBytes_FromStringAndSize((const char *)mac, sizeof mac);
}

static PyMethodDef module_methods[] = {
    {"key_state", key_state, METH_O, "The precomputed HMAC-SHA256 state of a key (opaque)."},
    {"digest", (PyCFunction)(void (*)(void))digest, METH_FASTCALL,
     "HMAC-SHA256 of the concatenated parts under a key_state()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_hmac", "HMAC-SHA256 from a precomputed key state.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__hmac(void)
{
    return PyModule_Create(&moduledef);
}
