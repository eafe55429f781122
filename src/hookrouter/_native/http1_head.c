/*
 * hookrouter._native._http1: whole HTTP/1.1 messages of the common shape,
 * parsed or written in one call.
 *
 * Theory of operation
 * -------------------
 * httptools (llhttp) parses fast, but it reports every field through a
 * Python callback, and those callbacks (lower-casing, decoding, limits)
 * cost several times the parse itself, on every request and again on every
 * delivery's response (figures: docs/performance.md). These functions
 * take a buffer that holds a *whole* message and build the Python objects
 * the sans-IO core wants (header dict with lower-cased names, body bytes)
 * in one pass.
 *
 * They are a fast path, not a second parser: they accept only a strict
 * subset of what llhttp accepts -- HTTP/1.1, CRLF line ends, token header
 * names, a Content-Length body (or none), no Transfer-Encoding, Expect,
 * Upgrade, obs-fold or odd Connection value, known request methods -- and
 * answer None for anything else (including a message not yet complete), in
 * which case the caller hands the same bytes to llhttp, which decides,
 * limits and reports errors as before. Where they answer, the result equals
 * llhttp's (tests/core/test_http1_fast.py checks that differentially):
 * leading whitespace of a value is dropped and trailing whitespace kept,
 * repeated fields are joined with ", ", values are Latin-1.
 *
 * It also writes the two messages the router sends per event, the ingest
 * answer (serialize_response) and the delivery request (serialize_request),
 * with the same decline-to-Python rule: where it answers, the bytes equal
 * the Python writer's (tests/core/test_http1_fast.py).
 *
 * Mechanics only: no limits of its own beyond the ones passed in, no state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

/* Longest header name we lower-case on the stack; longer ones go to llhttp. */
#define MAX_NAME 128
/* Content-Length digits accepted (10^18 fits an int64). */
#define MAX_LENGTH_DIGITS 18

static PyObject *methods[7]; /* interned "POST", "GET", ... */
static const char *const method_names[7] = {"POST", "GET", "PUT", "PATCH", "DELETE", "HEAD",
                                            "OPTIONS"};
static PyObject *empty_bytes;
static PyObject *empty_str;

/*
 * Common header names (lower case), made into interned str once: a header
 * with one of them takes the shared object, whose hash is computed once,
 * instead of a new str that the dict hashes again (an allocation, a hash
 * and a free per field, about ten fields per event between its request and
 * its delivery's response). The same list as
 * core/http1.py's KNOWN_HEADER_NAMES, which serves the llhttp path.
 */
#define MAX_KNOWN_LEN 32
static const char *const known_spellings[] = {
    "host", "content-type", "content-length", "user-agent", "accept", "accept-encoding",
    "connection", "stripe-signature", "x-github-event", "x-github-delivery",
    "x-github-hook-id", "x-hub-signature-256", "x-shopify-hmac-sha256", "x-shopify-topic",
    "x-shopify-webhook-id", "x-shopify-shop-domain", "x-slack-signature",
    "x-slack-request-timestamp", "webhook-id", "webhook-timestamp", "webhook-signature",
    "svix-id", "svix-timestamp", "svix-signature", "server", "date", "keep-alive",
    "retry-after", "cache-control", "vary", "content-encoding", "location", "x-request-id",
};
#define KNOWN_COUNT ((int)(sizeof(known_spellings) / sizeof(known_spellings[0])))
static PyObject *known_objects[KNOWN_COUNT];
static Py_ssize_t known_lengths[KNOWN_COUNT];
/* Indexes in known_spellings of the names whose values shape the framing. */
#define KNOWN_CONTENT_LENGTH 2
#define KNOWN_CONNECTION 6

/* The index in the table of a lower-cased name, or -1. */
static int known_index(const char *lower, Py_ssize_t len)
{
    if (len > MAX_KNOWN_LEN)
        return -1;
    for (int i = 0; i < KNOWN_COUNT; i++) {
        if (known_lengths[i] == len && known_spellings[i][0] == lower[0] &&
            memcmp(known_spellings[i], lower, (size_t)len) == 0)
            return i;
    }
    return -1;
}

/* RFC 9110 tchar, lower-cased (0: not a tchar): the name is checked and
 * lowered in one pass. */
static unsigned char lower_tchar[256];

static void init_tables(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    for (int c = '0'; c <= '9'; c++)
        lower_tchar[c] = (unsigned char)c;
    for (int c = 'a'; c <= 'z'; c++)
        lower_tchar[c] = (unsigned char)c;
    for (int c = 'A'; c <= 'Z'; c++)
        lower_tchar[c] = (unsigned char)(c + 32);
    for (const char *p = extra; *p; p++)
        lower_tchar[(unsigned char)*p] = (unsigned char)*p;
    for (int i = 0; i < KNOWN_COUNT; i++)
        known_lengths[i] = (Py_ssize_t)strlen(known_spellings[i]);
}

/* A field value byte llhttp accepts: HTAB, visible ASCII, space, obs-text. */
static inline int value_byte(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/*
 * The end of the run of value bytes from p: eight at a time while no byte is
 * below 0x20 or DEL (exact word tests, Bit Twiddling Hacks' hasless/haszero),
 * then byte by byte, which also takes HTAB. Values are most of a head's
 * bytes (a signature header alone is ~100); one byte at a time cost ~5
 * instructions a byte.
 */
static const char *skip_value(const char *p, const char *end)
{
    while (end - p >= 8) {
        unsigned long long w;
        memcpy(&w, p, 8);
        unsigned long long del = w ^ (ONES * 0x7f);
        if (((w - ONES * 0x20) & ~w & HIGHS) | ((del - ONES) & ~del & HIGHS))
            break;
        p += 8;
    }
    while (p < end && value_byte((unsigned char)*p))
        p++;
    return p;
}

static inline int same_lower(const char *lower, Py_ssize_t len, const char *word)
{
    return (Py_ssize_t)strlen(word) == len && memcmp(lower, word, (size_t)len) == 0;
}

static int ascii_casecmp(const char *s, Py_ssize_t len, const char *word)
{
    if ((Py_ssize_t)strlen(word) != len)
        return 1;
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + 32);
        if (c != (unsigned char)word[i])
            return 1;
    }
    return 0;
}

/* The framing facts a header block carries, as far as the fast path cares. */
typedef struct {
    long long content_length; /* -1: none */
    int close;                /* Connection: close */
    Py_ssize_t accounted;     /* sum of name + value + 4, as the core counts */
    Py_ssize_t count;
} framing_t;

/* A new str from ASCII/Latin-1 bytes. */
static PyObject *latin1(const char *s, Py_ssize_t len)
{
    if (len == 0) {
        Py_INCREF(empty_str);
        return empty_str;
    }
    return PyUnicode_DecodeLatin1(s, len, NULL);
}

/* The body bytes (the shared empty bytes when there is none). */
static PyObject *body_bytes(const char *p, long long length)
{
    if (length == 0) {
        Py_INCREF(empty_bytes);
        return empty_bytes;
    }
    return PyBytes_FromStringAndSize(p, (Py_ssize_t)length);
}

/* Store name: value in headers, joining a repeat with ", ". 0 ok, -1 error. */
static int put_header(PyObject *headers, int known, const char *name, Py_ssize_t name_len,
                      const char *value, Py_ssize_t value_len)
{
    PyObject *key;
    if (known >= 0) {
        key = known_objects[known];
        Py_INCREF(key);
    } else if ((key = PyUnicode_FromStringAndSize(name, name_len)) == NULL) { /* ASCII: tchar */
        return -1;
    }
    PyObject *text = latin1(value, value_len);
    if (text == NULL) {
        Py_DECREF(key);
        return -1;
    }
    /* One lookup: inserts text, or answers the value a repeat found there (the
     * size tells which: shared objects such as "" make identity ambiguous). */
    Py_ssize_t before = PyDict_GET_SIZE(headers);
    PyObject *old = PyDict_SetDefault(headers, key, text); /* borrowed */
    int rc = old == NULL ? -1 : 0;
    if (old != NULL && PyDict_GET_SIZE(headers) == before) {
        PyObject *joined = PyUnicode_FromFormat("%U, %U", old, text);
        rc = joined == NULL ? -1 : PyDict_SetItem(headers, key, joined);
        Py_XDECREF(joined);
    }
    Py_DECREF(key);
    Py_DECREF(text);
    return rc;
}

/*
 * Parse header lines from *pp up to and including the empty line.
 * Returns 1 on success (headers filled, *pp after the blank line), 0 when the
 * block is outside the fast subset, -1 on a Python error.
 */
static int parse_fields(const char **pp, const char *end, PyObject *headers, framing_t *f)
{
    const char *p = *pp;
    char lower[MAX_NAME];
    for (;;) {
        if (end - p < 2)
            return 0;
        if (p[0] == '\r' && p[1] == '\n') {
            *pp = p + 2;
            return 1;
        }
        Py_ssize_t name_len = 0;
        unsigned char c;
        while (p < end && (c = lower_tchar[(unsigned char)*p]) != 0) {
            if (name_len == MAX_NAME)
                return 0; /* llhttp's */
            lower[name_len++] = (char)c;
            p++;
        }
        if (name_len == 0 || p >= end || *p != ':')
            return 0; /* obs-fold, bad token, space before the colon, ... */
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *value = p;
        p = skip_value(p, end);
        Py_ssize_t value_len = p - value;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return 0; /* bare LF, a control byte, or the end of the buffer */
        p += 2;
        f->count++;
        f->accounted += name_len + value_len + 4;
        int known = known_index(lower, name_len);
        if (known == KNOWN_CONTENT_LENGTH) {
            if (f->content_length >= 0 || value_len == 0 || value_len > MAX_LENGTH_DIGITS)
                return 0;
            long long n = 0;
            for (Py_ssize_t i = 0; i < value_len; i++) {
                unsigned char d = (unsigned char)value[i];
                if (d < '0' || d > '9')
                    return 0;
                n = n * 10 + (d - '0');
            }
            f->content_length = n;
        } else if (known == KNOWN_CONNECTION) {
            if (ascii_casecmp(value, value_len, "close") == 0)
                f->close = 1;
            else if (ascii_casecmp(value, value_len, "keep-alive") != 0)
                return 0;
        } else if (known < 0 && (same_lower(lower, name_len, "transfer-encoding") ||
                                 same_lower(lower, name_len, "expect") ||
                                 same_lower(lower, name_len, "upgrade"))) {
            return 0;
        }
        if (put_header(headers, known, lower, name_len, value, value_len) < 0)
            return -1;
    }
}

/* The request method at p (followed by a space), or NULL. */
static PyObject *known_method(const char *p, const char *end, const char **after)
{
    for (int i = 0; i < 7; i++) {
        size_t len = strlen(method_names[i]);
        if ((size_t)(end - p) > len && memcmp(p, method_names[i], len) == 0 && p[len] == ' ') {
            *after = p + len + 1;
            return methods[i];
        }
    }
    return NULL;
}

/* parse_request(data, start, max_header_bytes, max_headers, max_body)
 *   -> None | (method, path, query, headers, body, keep_alive, end) */
static PyObject *parse_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "parse_request(data: bytes, start, max_header_bytes, max_headers, max_body)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_header_bytes = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_headers = PyLong_AsSsize_t(args[3]);
    long long max_body = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > size) {
        PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        return NULL;
    }
    const char *p = buf + start;
    /* Only a head that ends within the limit: anything longer is llhttp's. */
    Py_ssize_t window = size - start < max_header_bytes ? size - start : max_header_bytes;
    const char *end = p + window;

    const char *target;
    PyObject *method = known_method(p, end, &target);
    if (method == NULL)
        Py_RETURN_NONE;
    /* origin-form only ("/path?query"): absolute-form and "*" are llhttp's */
    if (target >= end || *target != '/')
        Py_RETURN_NONE;
    p = target;
    while (p < end && *p >= 0x21 && *p <= 0x7e)
        p++;
    Py_ssize_t target_len = p - target;
    if (target_len == 0 || end - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0)
        Py_RETURN_NONE;
    p += 11;

    PyObject *headers = PyDict_New();
    if (headers == NULL)
        return NULL;
    framing_t f = {-1, 0, target_len, 0};
    int ok = parse_fields(&p, end, headers, &f);
    if (ok <= 0 || f.accounted > max_header_bytes || f.count > max_headers ||
        f.content_length > max_body) {
        Py_DECREF(headers);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    long long length = f.content_length < 0 ? 0 : f.content_length;
    if (length > (long long)(buf + size - p)) { /* body not all here yet */
        Py_DECREF(headers);
        Py_RETURN_NONE;
    }
    const char *mark = memchr(target, '?', (size_t)target_len);
    Py_ssize_t path_len = mark ? mark - target : target_len;
    PyObject *path = latin1(target, path_len);
    PyObject *query = mark ? latin1(mark + 1, target_len - path_len - 1)
                           : (Py_INCREF(empty_str), empty_str);
    PyObject *body = body_bytes(p, length);
    Py_ssize_t finish = (Py_ssize_t)(p - buf) + (Py_ssize_t)length;
    if (path == NULL || query == NULL || body == NULL) {
        Py_XDECREF(path);
        Py_XDECREF(query);
        Py_XDECREF(body);
        Py_DECREF(headers);
        return NULL;
    }
    Py_INCREF(method);
    return Py_BuildValue("(NNNNNOn)", method, path, query, headers, body,
                         f.close ? Py_False : Py_True, finish);
}

/* parse_response(data, max_header_bytes, body_cap)
 *   -> None | (status, headers, body, keep_alive)   -- data must be exactly one response */
static PyObject *parse_response(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "parse_response(data: bytes, max_header_bytes, body_cap)");
        return NULL;
    }
    Py_ssize_t max_header_bytes = PyLong_AsSsize_t(args[1]);
    long long body_cap = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    const char *p = buf;
    const char *end = buf + (size < max_header_bytes ? size : max_header_bytes);
    /* "HTTP/1.1 " + three digits, 200-599 (interim 1xx responses are llhttp's). */
    if (end - p < 14 || memcmp(p, "HTTP/1.1 ", 9) != 0)
        Py_RETURN_NONE;
    p += 9;
    if (p[0] < '2' || p[0] > '5' || p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9')
        Py_RETURN_NONE;
    int status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    if (*p == ' ')
        p = skip_value(p + 1, end);
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
        Py_RETURN_NONE;
    p += 2;

    PyObject *headers = PyDict_New();
    if (headers == NULL)
        return NULL;
    framing_t f = {-1, 0, 0, 0};
    int ok = parse_fields(&p, end, headers, &f);
    /* No length: the body runs to the connection's end (llhttp and EOF decide). */
    int bodiless = status == 204 || status == 304;
    long long length = bodiless ? 0 : f.content_length;
    if (ok <= 0 || f.accounted > max_header_bytes || length < 0 || length > body_cap ||
        length != (long long)(buf + size - p)) {
        Py_DECREF(headers);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *body = body_bytes(p, length);
    if (body == NULL) {
        Py_DECREF(headers);
        return NULL;
    }
    return Py_BuildValue("(iNNO)", status, headers, body, f.close ? Py_False : Py_True);
}

/* The Latin-1 bytes of a str whose characters all fit one byte (else 0). */
static int latin1_view(PyObject *s, const char **data, Py_ssize_t *len)
{
    if (!PyUnicode_Check(s))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    if (PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND)
        return 0;
    *data = (const char *)PyUnicode_1BYTE_DATA(s);
    *len = PyUnicode_GET_LENGTH(s);
    return 1;
}

static inline int has_line_break(const char *s, Py_ssize_t len)
{
    return memchr(s, '\r', (size_t)len) != NULL || memchr(s, '\n', (size_t)len) != NULL;
}

/* A run of Latin-1 bytes inside a str. */
typedef struct {
    const char *data;
    Py_ssize_t len;
} piece_t;

#define MAX_SERIALIZED_HEADERS 64

/*
 * The Latin-1 views of count (str, str) pairs, as name, value, name, ...
 * in fields, their lengths added to *total. 0 (decline) when a pair has
 * another shape or text that is not Latin-1, or, with refuse_breaks, a CR or
 * LF in a name or value or a colon in a name (the request writer refuses
 * those: header injection).
 */
static int field_views(PyObject *const *pairs, Py_ssize_t count, piece_t *fields,
                       int refuse_breaks, Py_ssize_t *total)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = pairs[i];
        piece_t *name = &fields[2 * i], *value = name + 1;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !latin1_view(PyTuple_GET_ITEM(pair, 0), &name->data, &name->len) ||
            !latin1_view(PyTuple_GET_ITEM(pair, 1), &value->data, &value->len))
            return 0;
        if (refuse_breaks && (has_line_break(name->data, name->len) ||
                              memchr(name->data, ':', (size_t)name->len) != NULL ||
                              has_line_break(value->data, value->len)))
            return 0;
        *total += name->len + value->len + 4; /* ": " and CRLF */
    }
    return 1;
}

/* Append len bytes at w; the end of what was written. */
static inline char *put(char *w, const char *src, Py_ssize_t len)
{
    memcpy(w, src, (size_t)len);
    return w + len;
}

/* Append "name: value\r\n" for each of the count fields. */
static char *put_fields(char *w, const piece_t *fields, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        w = put(w, fields[2 * i].data, fields[2 * i].len);
        w = put(w, ": ", 2);
        w = put(w, fields[2 * i + 1].data, fields[2 * i + 1].len);
        w = put(w, "\r\n", 2);
    }
    return w;
}

/*
 * serialize_request(method, target, host, headers, user_agent, body) -> bytes | None
 *
 * The request bytes core/http1client.serialize_request writes, built in one
 * allocation: "METHOD target HTTP/1.1", host, the headers in order,
 * user-agent, content-length, then the body. None (the caller's Python path
 * decides, and raises its errors) when a header would be refused (a CR or LF
 * in a name or value, a colon in a name), a string is not Latin-1, headers
 * is not a list or tuple of (str, str) pairs, or there are more than 64 of
 * them. In compiled Python this was an f-string and five substring tests
 * per header; here it is one pass.
 */
static PyObject *serialize_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "serialize_request(method, target, host, headers, user_agent, body)");
        return NULL;
    }
    PyObject *headers = args[3], *body = args[5];
    if (!(PyList_CheckExact(headers) || PyTuple_CheckExact(headers)) || !PyBytes_CheckExact(body))
        Py_RETURN_NONE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    if (count > MAX_SERIALIZED_HEADERS)
        Py_RETURN_NONE;
    piece_t method, target, host, agent, fields[2 * MAX_SERIALIZED_HEADERS];
    if (!latin1_view(args[0], &method.data, &method.len) ||
        !latin1_view(args[1], &target.data, &target.len) ||
        !latin1_view(args[2], &host.data, &host.len) ||
        !latin1_view(args[4], &agent.data, &agent.len))
        Py_RETURN_NONE;
    static const char line_tail[] = " HTTP/1.1\r\nhost: ";
    static const char agent_head[] = "user-agent: ";
    static const char length_head[] = "\r\ncontent-length: ";
    char digits[24];
    int digits_len = snprintf(digits, sizeof digits, "%zd", PyBytes_GET_SIZE(body));
    /* "METHOD target HTTP/1.1\r\nhost: host\r\n", the fields, "user-agent: agent",
     * "\r\ncontent-length: n", "\r\n\r\n", the body */
    Py_ssize_t total = method.len + 1 + target.len + (Py_ssize_t)(sizeof line_tail - 1) + host.len +
                       2 + (Py_ssize_t)(sizeof agent_head - 1) + agent.len +
                       (Py_ssize_t)(sizeof length_head - 1) + digits_len + 4 +
                       PyBytes_GET_SIZE(body);
    if (!field_views(PySequence_Fast_ITEMS(headers), count, fields, 1, &total))
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    w = put(w, method.data, method.len);
    *w++ = ' ';
    w = put(w, target.data, target.len);
    w = put(w, line_tail, sizeof line_tail - 1);
    w = put(w, host.data, host.len);
    w = put(w, "\r\n", 2);
    w = put_fields(w, fields, count);
    w = put(w, agent_head, sizeof agent_head - 1);
    w = put(w, agent.data, agent.len);
    w = put(w, length_head, sizeof length_head - 1);
    w = put(w, digits, digits_len);
    w = put(w, "\r\n\r\n", 4);
    w = put(w, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body));
    assert(w == PyBytes_AS_STRING(out) + total);
    return out;
}

/*
 * serialize_response(status_line, content_type, body, date, headers, close) -> bytes | None
 *
 * The response bytes core/http1.serialize_response writes (status line,
 * content-type, content-length, date when not empty, the headers in order,
 * "connection: close" when asked, then the body), in one allocation. None
 * when a string is not Latin-1 or the shapes are not the usual ones (the
 * caller's Python path then writes it, or raises). In compiled Python this
 * was a list of pieces, two encodes, str(len) and a join per answer.
 */
static PyObject *serialize_response(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "serialize_response(status_line, content_type, body, date, headers, close)");
        return NULL;
    }
    PyObject *status_line = args[0], *body = args[2], *date = args[3], *headers = args[4];
    if (!PyBytes_CheckExact(status_line) || !PyBytes_CheckExact(body) ||
        !PyBytes_CheckExact(date) || !PyTuple_CheckExact(headers))
        Py_RETURN_NONE;
    Py_ssize_t count = PyTuple_GET_SIZE(headers);
    if (count > MAX_SERIALIZED_HEADERS)
        Py_RETURN_NONE;
    int close = PyObject_IsTrue(args[5]);
    if (close < 0)
        return NULL;
    piece_t ctype, fields[2 * MAX_SERIALIZED_HEADERS];
    if (!latin1_view(args[1], &ctype.data, &ctype.len))
        Py_RETURN_NONE;
    static const char ctype_head[] = "content-type: ";
    static const char length_head[] = "\r\ncontent-length: ";
    static const char date_head[] = "date: ";
    static const char closing[] = "connection: close\r\n";
    char digits[24];
    int digits_len = snprintf(digits, sizeof digits, "%zd", PyBytes_GET_SIZE(body));
    Py_ssize_t date_len = PyBytes_GET_SIZE(date);
    Py_ssize_t total = PyBytes_GET_SIZE(status_line) + (Py_ssize_t)(sizeof ctype_head - 1) +
                       ctype.len + (Py_ssize_t)(sizeof length_head - 1) + digits_len + 2 +
                       (date_len ? (Py_ssize_t)(sizeof date_head - 1) + date_len + 2 : 0) +
                       (close ? (Py_ssize_t)(sizeof closing - 1) : 0) + 2 +
                       PyBytes_GET_SIZE(body);
    if (!field_views(PySequence_Fast_ITEMS(headers), count, fields, 0, &total))
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    w = put(w, PyBytes_AS_STRING(status_line), PyBytes_GET_SIZE(status_line));
    w = put(w, ctype_head, sizeof ctype_head - 1);
    w = put(w, ctype.data, ctype.len);
    w = put(w, length_head, sizeof length_head - 1);
    w = put(w, digits, digits_len);
    w = put(w, "\r\n", 2);
    if (date_len) {
        w = put(w, date_head, sizeof date_head - 1);
        w = put(w, PyBytes_AS_STRING(date), date_len);
        w = put(w, "\r\n", 2);
    }
    w = put_fields(w, fields, count);
    if (close)
        w = put(w, closing, sizeof closing - 1);
    w = put(w, "\r\n", 2);
    w = put(w, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body));
    assert(w == PyBytes_AS_STRING(out) + total);
    return out;
}

static PyMethodDef module_methods[] = {
    {"parse_request", (PyCFunction)(void (*)(void))parse_request, METH_FASTCALL,
     "A whole request of the common shape at data[start:], or None (see the module)."},
    {"parse_response", (PyCFunction)(void (*)(void))parse_response, METH_FASTCALL,
     "data as exactly one response of the common shape, or None (see the module)."},
    {"serialize_request", (PyCFunction)(void (*)(void))serialize_request, METH_FASTCALL,
     "A request's bytes in one allocation, or None for the caller's Python path."},
    {"serialize_response", (PyCFunction)(void (*)(void))serialize_response, METH_FASTCALL,
     "A response's bytes in one allocation, or None for the caller's Python path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_http1",
    "Whole HTTP/1.1 messages of the common shape in one call (fast path before llhttp).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__http1(void)
{
    if (strcmp(known_spellings[KNOWN_CONTENT_LENGTH], "content-length") != 0 ||
        strcmp(known_spellings[KNOWN_CONNECTION], "connection") != 0) {
        PyErr_SetString(PyExc_ImportError, "_http1: the framing names moved in the table");
        return NULL;
    }
    init_tables();
    for (int i = 0; i < 7; i++) {
        if (methods[i] == NULL) {
            methods[i] = PyUnicode_InternFromString(method_names[i]);
            if (methods[i] == NULL)
                return NULL;
        }
    }
    for (int i = 0; i < KNOWN_COUNT; i++) {
        if (known_objects[i] == NULL) {
            known_objects[i] = PyUnicode_InternFromString(known_spellings[i]);
            if (known_objects[i] == NULL)
                return NULL;
        }
    }
    if (empty_bytes == NULL && (empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return NULL;
    if (empty_str == NULL && (empty_str = PyUnicode_New(0, 0)) == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
