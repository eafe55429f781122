/*
 * hookrouter._native._engine: a batch byte transport for the ingress path.
 *
 * Theory of operation
 * -------------------
 * The asyncio loop watches one fd (fileno()).  When it is readable the shell
 * calls poll() once: the backend reaps every ready socket (epoll) or every
 * completion (io_uring) and returns ONE list of (kind, conn_id, payload)
 * tuples, so Python pays one call per loop turn instead of one callback per
 * read.  Python answers with send()/close()/abort()/pause()/resume(), which
 * only queue work, and calls flush() once at the end of the turn to push all
 * of it to the kernel (one writev per connection for epoll, one
 * io_uring_enter for the whole batch with io_uring).
 *
 * This file holds what both backends share: the Python type, the connection
 * table with generation-tagged ids, send queues, events and statistics.
 * Mechanics only: no HTTP here (parsing stays in the sans-IO core).
 */
#include "engine.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

long hr_dbg_conns, hr_dbg_chunks, hr_dbg_bufs, hr_dbg_engines;

/* -- connection table ----------------------------------------------------- */

uint64_t hr_conn_id(const Engine *e, const hr_conn_t *c)
{
    return ((uint64_t)c->gen << 32) | (uint64_t)(c - e->conns);
}

hr_conn_t *hr_conn_new(Engine *e, int fd)
{
    if (e->free_top == 0)
        return NULL;
    hr_conn_t *c = &e->conns[e->free_stack[--e->free_top]];
    /* A released slot may still sit in the dirty list: keep its links. */
    uint32_t gen = c->gen, dirty_next = c->dirty_next;
    uint8_t in_dirty = c->in_dirty;
    memset(c, 0, sizeof(*c));
    c->gen = gen;
    c->in_dirty = in_dirty;
    c->dirty_next = dirty_next;
    c->fd = fd;
    c->state = CS_OPEN;
    c->last_ms = e->now_ms;
    e->nconns++;
    e->st.accepted++;
    HR_DBG(hr_dbg_conns, 1);
    return c;
}

void hr_queue_clear(hr_conn_t *c)
{
    hr_chunk_t *ch = c->q_head;
    while (ch) {
        hr_chunk_t *next = ch->next;
        Py_DECREF(ch->obj);
        PyMem_Free(ch);
        HR_DBG(hr_dbg_chunks, -1);
        ch = next;
    }
    c->q_head = c->q_tail = NULL;
    c->q_bytes = 0;
    c->q_count = 0;
}

static PyObject *reason_str(const hr_conn_t *c)
{
    switch (c->close_reason) {
    case R_CLOSED: return PyUnicode_FromString("closed");
    case R_ABORTED: return PyUnicode_FromString("aborted");
    case R_RESET: return PyUnicode_FromString("reset");
    case R_TIMEOUT: return PyUnicode_FromString("timeout");
    case R_SHUTDOWN: return PyUnicode_FromString("shutdown");
    case R_ERRNO: {
        const char *name = strerrorname_np(c->close_errno);
        return name ? PyUnicode_FromFormat("error:%s", name)
                    : PyUnicode_FromFormat("error:%d", c->close_errno);
    }
    default: return PyUnicode_FromString("closed");
    }
}

void hr_conn_release(Engine *e, hr_conn_t *c)
{
    hr_queue_clear(c);
    PyObject *reason = reason_str(c);
    if (reason)
        hr_emit(e, HR_EV_CLOSED, c, reason);
    else
        PyErr_Clear(); /* out of memory: the slot is still released */
    c->state = CS_FREE;
    c->fd = -1;
    c->gen++;
    e->free_stack[e->free_top++] = (uint32_t)(c - e->conns);
    e->nconns--;
    e->st.closed++;
    HR_DBG(hr_dbg_conns, -1);
    if (e->backend == BK_URING)
        hr_uring_slot_freed(e);
    else
        hr_epoll_slot_freed(e);
}

void hr_set_reason(hr_conn_t *c, int err)
{
    if (c->close_reason)
        return;
    if (err == ECONNRESET || err == EPIPE || err == ECONNABORTED) {
        c->close_reason = R_RESET;
    } else {
        c->close_reason = R_ERRNO;
        c->close_errno = err;
    }
}

void hr_conn_mark_dirty(Engine *e, hr_conn_t *c)
{
    if (c->in_dirty)
        return;
    c->in_dirty = 1;
    c->dirty_next = e->dirty_head;
    e->dirty_head = (uint32_t)(c - e->conns);
}

void hr_queue_consume(Engine *e, hr_conn_t *c, size_t n)
{
    e->st.bytes_out += n;
    c->q_bytes -= n;
    while (n && c->q_head) {
        hr_chunk_t *ch = c->q_head;
        size_t left = (size_t)(PyBytes_GET_SIZE(ch->obj) - ch->off);
        if (n < left) {
            ch->off += (Py_ssize_t)n;
            break;
        }
        n -= left;
        c->q_head = ch->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->q_count--;
        Py_DECREF(ch->obj);
        PyMem_Free(ch);
        HR_DBG(hr_dbg_chunks, -1);
    }
    if (c->above_hwm && c->q_bytes <= e->low_water) {
        c->above_hwm = 0;
        hr_emit(e, HR_EV_DRAINED, c, Py_NewRef(Py_None));
    }
}

/* -- events --------------------------------------------------------------- */

int hr_emit(Engine *e, int kind, hr_conn_t *c, PyObject *payload)
{
    if (!payload)
        return -1;
    PyObject *id = PyLong_FromUnsignedLongLong(hr_conn_id(e, c));
    PyObject *k = PyLong_FromLong(kind);
    PyObject *t = (id && k) ? PyTuple_Pack(3, k, id, payload) : NULL;
    Py_XDECREF(id);
    Py_XDECREF(k);
    Py_DECREF(payload);
    if (!t)
        return -1;
    int rc = PyList_Append(e->events, t);
    Py_DECREF(t);
    return rc;
}

int hr_emit_data(Engine *e, hr_conn_t *c, const char *buf, size_t n)
{
    e->st.bytes_in += n;
    e->st.recv_events++;
    c->last_ms = e->now_ms;
    return hr_emit(e, HR_EV_DATA, c, PyBytes_FromStringAndSize(buf, (Py_ssize_t)n));
}

