/* The Python-visible Engine type and module; bookkeeping is in engine.c. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static int64_t now_or(long long now_ms)
{
    if (now_ms >= 0)
        return now_ms;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static hr_conn_t *lookup(Engine *e, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    uint64_t slot = id & 0xffffffffULL;
    if (slot >= e->max_conns)
        return NULL;
    hr_conn_t *c = &e->conns[slot];
    if (c->state == CS_FREE || c->gen != (uint32_t)(id >> 32))
        return NULL;
    return c;
}

static int open_listener(const char *host, int port, int backlog)
{
    struct addrinfo hints, *res = NULL;
    char portbuf[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    int gai = getaddrinfo(host, portbuf, &hints, &res);
    if (gai != 0) {
        PyErr_Format(PyExc_OSError, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        goto fail;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* Accepted sockets inherit TCP_NODELAY from the listener on Linux, which
     * saves one setsockopt per connection: responses are complete and small,
     * Nagle would only delay them. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, backlog) < 0)
        goto fail;
    freeaddrinfo(res);
    return fd;
fail:
    PyErr_SetFromErrno(PyExc_OSError);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return -1;
}

static void engine_free_table(Engine *e)
{
    PyMem_Free(e->conns);
    PyMem_Free(e->free_stack);
    e->conns = NULL;
    e->free_stack = NULL;
}

static int alloc_table(Engine *e)
{
    e->conns = PyMem_Calloc(e->max_conns, sizeof(hr_conn_t));
    e->free_stack = PyMem_Calloc(e->max_conns, sizeof(uint32_t));
    if (!e->conns || !e->free_stack) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < e->max_conns; i++) {
        e->conns[i].fd = -1;
        e->conns[i].dirty_next = HR_NO_SLOT;
        e->free_stack[i] = e->max_conns - 1 - i; /* slot 0 first */
    }
    e->free_top = e->max_conns;
    return 0;
}

static int Engine_init(Engine *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"backend", "host", "port", "backlog", "max_conns",
                             "ring_entries", "buf_count", "buf_size", "idle_timeout_ms",
                             "linger_ms", "high_water", "notify", NULL};
    const char *backend, *host, *notify = "eventfd";
    int port, backlog = 1024;
    unsigned max_conns = 4096, ring_entries = 1024, buf_count = 1024, buf_size = 4096;
    long long idle_ms = 0, linger_ms = 2000;
    Py_ssize_t high_water = 65536;
    if (e->running || e->conns) {
        PyErr_SetString(PyExc_RuntimeError, "Engine already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssi|$iIIIILLns", kwlist, &backend, &host, &port,
                                     &backlog, &max_conns, &ring_entries, &buf_count,
                                     &buf_size, &idle_ms, &linger_ms, &high_water, &notify))
        return -1;
    if (strcmp(backend, "epoll") == 0) {
        e->backend = BK_EPOLL;
    } else if (strcmp(backend, "io_uring") == 0) {
        e->backend = BK_URING;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown backend %R (epoll | io_uring)", PyTuple_GET_ITEM(args, 0));
        return -1;
    }
    int notify_ring = strcmp(notify, "ring") == 0;
    if (!notify_ring && strcmp(notify, "eventfd") != 0) {
        PyErr_SetString(PyExc_ValueError, "notify must be 'eventfd' or 'ring'");
        return -1;
    }
    if (max_conns == 0 || max_conns > (1U << 24) || buf_size < 64 || buf_size > (1U << 20) ||
        high_water < 1) {
        PyErr_SetString(PyExc_ValueError, "max_conns, buf_size or high_water out of range");
        return -1;
    }
    e->max_conns = max_conns;
    e->buf_count = buf_count;
    e->buf_size = buf_size;
    e->high_water = (size_t)high_water;
    e->low_water = (size_t)high_water / 4; /* asyncio's default ratio */
    e->idle_timeout_ms = idle_ms;
    e->linger_ms = linger_ms;
    e->now_ms = now_or(-1);
    e->dirty_head = HR_NO_SLOT;
    e->epfd = -1;
    e->listen_fd = -1;
    if (!(e->events = PyList_New(0)) || alloc_table(e) < 0)
        return -1;
    e->listen_fd = open_listener(host, port, backlog);
    if (e->listen_fd < 0)
        return -1;
    int rc = e->backend == BK_EPOLL ? hr_epoll_init(e) : hr_uring_init(e, ring_entries, notify_ring);
    if (rc < 0) {
        close(e->listen_fd);
        e->listen_fd = -1;
        return -1;
    }
    e->running = 1;
    HR_DBG(hr_dbg_engines, 1);
    return 0;
}

static PyObject *not_running(void)
{
    PyErr_SetString(PyExc_RuntimeError, "engine is shut down");
    return NULL;
}

static PyObject *Engine_fileno(Engine *e, PyObject *unused)
{
    if (!e->running)
        return not_running();
    return PyLong_FromLong(e->backend == BK_EPOLL ? e->epfd : hr_uring_fileno(e));
}

static PyObject *Engine_poll(Engine *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max_events", "now_ms", "timeout_ms", NULL};
    int max_events = 512, timeout_ms = 0;
    long long now_ms = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iLi", kwlist, &max_events, &now_ms, &timeout_ms))
        return NULL;
    if (!e->running)
        return not_running();
    if (max_events < 1)
        max_events = 1;
    e->now_ms = now_or(now_ms);
    int rc = e->backend == BK_EPOLL ? hr_epoll_poll(e, max_events, timeout_ms)
                                    : hr_uring_poll(e, max_events, timeout_ms);
    if (rc < 0)
        return NULL;
    PyObject *fresh = PyList_New(0);
    if (!fresh)
        return NULL;
    PyObject *out = e->events;
    e->events = fresh;
    return out;
}

static PyObject *Engine_send(Engine *e, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send(conn_id, data)");
        return NULL;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes (immutable: the kernel reads it later)");
        return NULL;
    }
    hr_conn_t *c = lookup(e, args[0]);
    if (!c)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    Py_ssize_t n = PyBytes_GET_SIZE(args[1]);
    if (c->state != CS_OPEN || n == 0)
        Py_RETURN_FALSE; /* after close()/abort() writes are dropped, as asyncio does */
    hr_chunk_t *ch = PyMem_Malloc(sizeof(*ch));
    if (!ch)
        return PyErr_NoMemory();
    HR_DBG(hr_dbg_chunks, 1);
    ch->next = NULL;
    ch->obj = Py_NewRef(args[1]);
    ch->off = 0;
    if (c->q_tail)
        c->q_tail->next = ch;
    else
        c->q_head = ch;
    c->q_tail = ch;
    c->q_bytes += (size_t)n;
    c->q_count++;
    hr_conn_mark_dirty(e, c);
    if (!c->above_hwm && c->q_bytes > e->high_water) {
        c->above_hwm = 1;
        Py_RETURN_TRUE; /* caller should pause producing until DRAINED */
    }
    Py_RETURN_FALSE;
}

static void teardown(Engine *e, hr_conn_t *c, int reason, int err)
{
    if (e->backend == BK_EPOLL)
        hr_epoll_teardown(e, c, reason, err);
    else
        hr_uring_teardown(e, c, reason, err);
}

static PyObject *Engine_close(Engine *e, PyObject *arg)
{
    hr_conn_t *c = lookup(e, arg);
    if (!c)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    if (c->state == CS_OPEN) {
        c->state = CS_CLOSING;
        hr_conn_mark_dirty(e, c); /* flush() drains, then shuts down */
    }
    Py_RETURN_TRUE;
}

static PyObject *Engine_abort(Engine *e, PyObject *arg)
{
    hr_conn_t *c = lookup(e, arg);
    if (!c)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    if (c->state != CS_DEAD) {
        c->want_abort = 1;
        teardown(e, c, R_ABORTED, 0);
    }
    Py_RETURN_TRUE;
}

static PyObject *set_paused(Engine *e, PyObject *arg, int paused)
{
    hr_conn_t *c = lookup(e, arg);
    if (!c)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    if (c->paused == paused || c->state != CS_OPEN)
        return Py_NewRef(c->state == CS_OPEN ? Py_True : Py_False);
    int rc = e->backend == BK_EPOLL ? hr_epoll_set_paused(e, c, paused)
                                    : hr_uring_set_paused(e, c, paused);
    if (rc < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *Engine_pause(Engine *e, PyObject *arg) { return set_paused(e, arg, 1); }
static PyObject *Engine_resume(Engine *e, PyObject *arg) { return set_paused(e, arg, 0); }

static PyObject *Engine_flush(Engine *e, PyObject *unused)
{
    if (!e->running)
        return not_running();
    int rc = e->backend == BK_EPOLL ? hr_epoll_flush(e) : hr_uring_flush(e);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Engine_sweep(Engine *e, PyObject *args)
{
    long long now_ms = -1;
    if (!PyArg_ParseTuple(args, "|L", &now_ms))
        return NULL;
    if (!e->running)
        return not_running();
    e->now_ms = now_or(now_ms);
    long expired = 0;
    for (uint32_t i = 0; i < e->max_conns; i++) {
        hr_conn_t *c = &e->conns[i];
        int64_t idle = e->now_ms - c->last_ms;
        if (c->state == CS_OPEN && e->idle_timeout_ms > 0 && idle > e->idle_timeout_ms) {
            e->st.timeouts++;
            teardown(e, c, R_TIMEOUT, 0);
            expired++;
        } else if (c->state == CS_LINGER && idle > e->linger_ms) {
            teardown(e, c, R_CLOSED, 0);
            expired++;
        }
    }
    if (e->backend == BK_URING)
        hr_uring_retry_accept(e);
    else
        hr_epoll_retry_accept(e);
    return PyLong_FromLong(expired);
}

static PyObject *Engine_close_all(Engine *e, PyObject *unused)
{
    for (uint32_t i = 0; i < e->max_conns; i++) {
        hr_conn_t *c = &e->conns[i];
        if (c->state == CS_OPEN) {
            c->state = CS_CLOSING;
            hr_conn_mark_dirty(e, c);
        }
    }
    return Engine_flush(e, NULL);
}

/* Hard stop: every connection is closed now (CLOSED "shutdown" events are
 * returned), kernel resources are released.  Idempotent. */
static PyObject *Engine_shutdown(Engine *e, PyObject *unused)
{
    if (e->running) {
        e->running = 0;
        if (e->listen_fd >= 0)
            close(e->listen_fd);
        e->listen_fd = -1;
        if (e->backend == BK_EPOLL)
            hr_epoll_destroy(e);
        else
            hr_uring_destroy(e);
        HR_DBG(hr_dbg_engines, -1);
    }
    if (!e->events)
        return PyList_New(0);
    PyObject *fresh = PyList_New(0);
    if (!fresh)
        return NULL;
    PyObject *out = e->events;
    e->events = fresh;
    return out;
}

/* Close the listening socket; open connections carry on. */
static PyObject *Engine_stop_accepting(Engine *e, PyObject *unused)
{
    if (e->running && e->listen_fd >= 0) {
        if (e->backend == BK_URING)
            hr_uring_stop_accepting(e);
        close(e->listen_fd); /* epoll drops it from the interest set */
        e->listen_fd = -1;
        if (e->backend == BK_URING && hr_uring_flush(e) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Engine_has_pending(Engine *e, PyObject *unused)
{
    int pending = e->running && PyList_GET_SIZE(e->events) > 0;
    if (e->running && e->backend == BK_URING)
        pending = pending || hr_uring_has_pending(e);
    return PyBool_FromLong(pending);
}

static PyObject *sockaddr_to_tuple(int fd, int peer)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
                  : getsockname(fd, (struct sockaddr *)&ss, &len);
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(si)", host, atoi(serv));
}

static PyObject *Engine_sockname(Engine *e, PyObject *unused)
{
    if (!e->running || e->listen_fd < 0)
        return not_running();
    return sockaddr_to_tuple(e->listen_fd, 0);
}

static PyObject *Engine_peername(Engine *e, PyObject *arg)
{
    hr_conn_t *c = lookup(e, arg);
    if (!c)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return sockaddr_to_tuple(c->fd, 1);
}

#define ST(name) #name, (unsigned long long)e->st.name
static PyObject *Engine_stats(Engine *e, PyObject *unused)
{
    unsigned long long pending_sends = 0, pending_bytes = 0, paused = 0;
    for (uint32_t i = 0; e->conns && i < e->max_conns; i++) {
        pending_sends += e->conns[i].q_count;
        pending_bytes += e->conns[i].q_bytes;
        paused += e->conns[i].state != CS_FREE && e->conns[i].paused;
    }
    unsigned long long outstanding = e->u ? e->u->outstanding : 0;
    unsigned long long syscalls = e->st.syscalls + (e->u ? e->u->ring.enters : 0);
    return Py_BuildValue(
        "{s:s,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:K,s:K,s:K,s:K}",
        "backend", e->backend == BK_EPOLL ? "epoll" : "io_uring", "connections", e->nconns,
        ST(accepted), ST(closed), ST(refused), ST(cqes), ST(sqes), ST(rearm_recv),
        ST(rearm_accept), ST(enobufs), ST(bytes_in), ST(bytes_out), ST(recv_events), ST(sends),
        ST(partial_sends), ST(timeouts), ST(accept_errors), ST(accept_pauses), ST(fd_pauses), "syscalls", syscalls,
        "buffers_outstanding", outstanding, "pending_sends", pending_sends, "pending_bytes",
        pending_bytes, "paused", paused, "eventfd_reads", (unsigned long long)e->st.eventfd_reads);
}

static PyObject *Engine_info(Engine *e, PyObject *unused)
{
    if (e->backend == BK_URING && e->u)
        return hr_uring_info(e);
    return Py_BuildValue("{s:s}", "backend", "epoll");
}

static PyObject *Engine_repr(Engine *e)
{
    return PyUnicode_FromFormat("<Engine %s running=%d connections=%u>",
                                e->backend == BK_EPOLL ? "epoll" : "io_uring", e->running,
                                e->nconns);
}

static void Engine_dealloc(Engine *e)
{
    PyObject_GC_UnTrack(e);
    PyObject *rest = Engine_shutdown(e, NULL);
    Py_XDECREF(rest);
    if (!rest)
        PyErr_Clear();
    Py_CLEAR(e->events);
    engine_free_table(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int Engine_traverse(Engine *e, visitproc visit, void *arg)
{
    Py_VISIT(e->events);
    return 0;
}

static PyMethodDef Engine_methods[] = {
    {"fileno", (PyCFunction)Engine_fileno, METH_NOARGS, "fd for loop.add_reader"},
    {"poll", (PyCFunction)(void (*)(void))Engine_poll, METH_VARARGS | METH_KEYWORDS,
     "poll(max_events=512, now_ms=-1, timeout_ms=0) -> list of (kind, conn_id, payload)"},
    {"send", (PyCFunction)(void (*)(void))Engine_send, METH_FASTCALL,
     "queue bytes; True when the connection just went above the high-water mark"},
    {"close", (PyCFunction)Engine_close, METH_O, "graceful close after queued sends"},
    {"abort", (PyCFunction)Engine_abort, METH_O, "close now with RST"},
    {"pause", (PyCFunction)Engine_pause, METH_O, "stop receiving for this connection"},
    {"resume", (PyCFunction)Engine_resume, METH_O, "receive again"},
    {"flush", (PyCFunction)Engine_flush, METH_NOARGS, "push queued work to the kernel"},
    {"sweep", (PyCFunction)Engine_sweep, METH_VARARGS, "expire idle and lingering connections"},
    {"close_all", (PyCFunction)Engine_close_all, METH_NOARGS, "graceful close of all"},
    {"shutdown", (PyCFunction)Engine_shutdown, METH_NOARGS, "hard stop; returns final events"},
    {"stop_accepting", (PyCFunction)Engine_stop_accepting, METH_NOARGS, "close the listener"},
    {"has_pending", (PyCFunction)Engine_has_pending, METH_NOARGS, "events left to poll"},
    {"sockname", (PyCFunction)Engine_sockname, METH_NOARGS, "bound (host, port)"},
    {"peername", (PyCFunction)Engine_peername, METH_O, "peer (host, port) or None"},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "counters"},
    {"info", (PyCFunction)Engine_info, METH_NOARGS, "backend setup details"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hookrouter._native._engine.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Batch byte transport over epoll or io_uring.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_traverse = (traverseproc)Engine_traverse,
    .tp_methods = Engine_methods,
    .tp_repr = (reprfunc)Engine_repr,
};

static PyObject *debug_counters(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:l,s:l,s:l,s:l}", "connections", hr_dbg_conns, "send_chunks",
                         hr_dbg_chunks, "buffers", hr_dbg_bufs, "engines", hr_dbg_engines);
}

static PyMethodDef module_methods[] = {
    {"probe", (PyCFunction)(void (*)(void))hr_probe, METH_VARARGS | METH_KEYWORDS,
     "probe(zcrx_ifname=None) -> dict of io_uring facts on this kernel"},
    {"debug_counters", debug_counters, METH_NOARGS, "live resource counts, process-wide (zero after teardown)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_engine", "Batch byte transport (epoll / io_uring).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    if (PyType_Ready(&EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Engine", (PyObject *)&EngineType) < 0 ||
        PyModule_AddIntConstant(m, "ACCEPTED", HR_EV_ACCEPTED) < 0 ||
        PyModule_AddIntConstant(m, "DATA", HR_EV_DATA) < 0 ||
        PyModule_AddIntConstant(m, "EOF", HR_EV_EOF) < 0 ||
        PyModule_AddIntConstant(m, "CLOSED", HR_EV_CLOSED) < 0 ||
        PyModule_AddIntConstant(m, "DRAINED", HR_EV_DRAINED) < 0 ||
#ifdef HR_DEBUG
        PyModule_AddObjectRef(m, "DEBUG_BUILD", Py_True) < 0 ||
#else
        PyModule_AddObjectRef(m, "DEBUG_BUILD", Py_False) < 0 ||
#endif
        0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
