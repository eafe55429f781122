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
 * states as an opaque bytes object; ``digest(state, parts)`` resumes them,
 * feeds every part and returns the 32-byte MAC. The state is as secret as
 * the key: callers keep it where they would keep the key.
 *
 * A key state holds only the two chaining values (64 bytes), not the two
 * SHA256_CTX structs (224): after exactly one block the rest of a context
 * is fixed (bit count 512, empty buffer), so ``resume`` rebuilds it. With
 * events spread over many tenants a key state is usually out of the CPU's
 * caches when its event arrives; two cache lines are read instead of five.
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
    SHA_LONG inner[8]; /* chaining value after the key XOR ipad block */
    SHA_LONG outer[8]; /* chaining value after the key XOR opad block */
} key_state_t;

/* A context as it stood right after hashing one block whose chaining value is h. */
static void resume(SHA256_CTX *ctx, const SHA_LONG h[8])
{
    SHA256_Init(ctx);
    memcpy(ctx->h, h, sizeof ctx->h);
    ctx->Nl = SHA256_CBLOCK * 8; /* bits hashed so far */
}

/* The chaining value of one padded-key block. */
static void one_block(SHA_LONG h[8], const unsigned char *block, unsigned char pad_byte)
{
    unsigned char pad[SHA256_CBLOCK];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = block[i] ^ pad_byte;
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, pad, sizeof pad);
    memcpy(h, ctx.h, sizeof ctx.h);
    memset(pad, 0, sizeof pad); /* key material off the stack */
    memset(&ctx, 0, sizeof ctx);
}

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
    one_block(state.inner, block, 0x36);
    one_block(state.outer, block, 0x5c);
    PyObject *out = PyBytes_FromStringAndSize((const char *)&state, sizeof state);
    memset(block, 0, sizeof block); /* key material off the stack */
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
    const key_state_t *key = (const key_state_t *)PyBytes_AS_STRING(args[0]);
    SHA256_CTX inner_ctx, outer_ctx;
    resume(&inner_ctx, key->inner);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *part = items[i];
        if (PyBytes_Check(part)) {
            SHA256_Update(&inner_ctx, PyBytes_AS_STRING(part), (size_t)PyBytes_GET_SIZE(part));
            continue;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(part, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(seq);
            memset(&inner_ctx, 0, sizeof inner_ctx);
            return NULL;
        }
        SHA256_Update(&inner_ctx, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    Py_DECREF(seq);
    unsigned char inner[SHA256_DIGEST_LENGTH], mac[SHA256_DIGEST_LENGTH];
    SHA256_Final(inner, &inner_ctx);
    resume(&outer_ctx, key->outer);
    SHA256_Update(&outer_ctx, inner, sizeof inner);
    SHA256_Final(mac, &outer_ctx);
    memset(&inner_ctx, 0, sizeof inner_ctx);
    memset(&outer_ctx, 0, sizeof outer_ctx);
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
