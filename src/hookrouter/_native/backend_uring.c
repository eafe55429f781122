/*
 * io_uring backend: multishot accept, multishot recv from a provided buffer
 * ring, one send in flight per connection.
 *
 * Per loop turn: poll() reads the eventfd, makes ONE io_uring_enter that
 * submits what is queued and runs deferred task work (DEFER_TASKRUN), walks
 * the CQ copying received bytes out of their buffers, returns every buffer to
 * the ring with one tail store, and re-arms any multishot op whose CQE came
 * without IORING_CQE_F_MORE (EOF, error, -ENOBUFS when the ring ran dry).
 * flush() queues sends and makes one more io_uring_enter.  So a turn costs
 * about three syscalls however many requests it carries.
 *
 * A slot is released only when the kernel holds no op naming it (conn->ops),
 * so a late CQE can never hit a reused slot, send buffers (Python bytes
 * objects) stay referenced until their CQE, and its fd is closed only after
 * every op using it (a shutdown included) has ended.
 */
#include "engine.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

enum { OP_ACCEPT = 1, OP_RECV, OP_SEND, OP_CANCEL, OP_CLOSE, OP_SHUTDOWN };
#define BGID 0


static uint64_t ud(Engine *e, int op, const hr_conn_t *c)
{
    uint64_t slot = c ? (uint64_t)(c - e->conns) : 0;
    uint64_t gen = c ? (c->gen & 0xffffffU) : 0;
    return ((uint64_t)op << 56) | (gen << 32) | slot;
}

static struct io_uring_sqe *get_sqe(Engine *e)
{
    struct io_uring_sqe *sqe = hr_ring_sqe(&e->u->ring);
    if (sqe)
        e->st.sqes++;
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "io_uring submission queue stayed full");
    return sqe;
}

static int want_recv(const hr_conn_t *c)
{
    if (c->eof || c->recv_armed)
        return 0;
    return (c->state == CS_OPEN && !c->paused) || c->state == CS_CLOSING || c->state == CS_LINGER;
}

static int arm_recv(Engine *e, hr_conn_t *c)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -1;
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = c->fd;
    sqe->ioprio = HR_RECV_MULTISHOT;
    sqe->flags = IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    sqe->user_data = ud(e, OP_RECV, c);
    c->recv_armed = 1;
    c->ops++;
    return 0;
}

/* Free slots below which accepts go one at a time: a multishot accept takes
 * every queued connection before its cancel lands, and one it takes with the
 * table full can only be closed (refused), not left waiting in the queue. */
#define ACCEPT_MARGIN 64

int hr_uring_arm_accept(Engine *e)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -1;
    int multishot = e->free_top > ACCEPT_MARGIN;
    sqe->opcode = IORING_OP_ACCEPT;
    sqe->fd = e->listen_fd;
    sqe->ioprio = multishot ? HR_ACCEPT_MULTISHOT : 0;
    sqe->accept_flags = SOCK_NONBLOCK | SOCK_CLOEXEC;
    sqe->user_data = ud(e, OP_ACCEPT, NULL);
    e->u->accept_armed = 1;
    e->u->accept_multishot = multishot;
    e->u->accept_cancelling = 0;
    e->u->accept_stalled = 0;
    return 0;
}

static int cancel(Engine *e, uint64_t target)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -1;
    sqe->opcode = IORING_OP_ASYNC_CANCEL;
    sqe->fd = -1;
    sqe->addr = target;
    sqe->user_data = ud(e, OP_CANCEL, NULL);
    return 0;
}

static int prep_send(Engine *e, hr_conn_t *c)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -1;
    int k = 0;
    for (hr_chunk_t *ch = c->q_head; ch && k < HR_IOV_MAX; ch = ch->next, k++) {
        c->iov[k].iov_base = PyBytes_AS_STRING(ch->obj) + ch->off;
        c->iov[k].iov_len = (size_t)(PyBytes_GET_SIZE(ch->obj) - ch->off);
    }
    sqe->fd = c->fd;
    sqe->msg_flags = MSG_NOSIGNAL;
    sqe->user_data = ud(e, OP_SEND, c);
    if (k == 1) {
        sqe->opcode = IORING_OP_SEND;
        sqe->addr = (uint64_t)(uintptr_t)c->iov[0].iov_base;
        sqe->len = (uint32_t)c->iov[0].iov_len;
    } else { /* pipelined answers: one sendmsg, iovecs live in the slot */
        memset(&c->msg, 0, sizeof(c->msg));
        c->msg.msg_iov = c->iov;
        c->msg.msg_iovlen = (size_t)k;
        sqe->opcode = IORING_OP_SENDMSG;
        sqe->addr = (uint64_t)(uintptr_t)&c->msg;
        sqe->len = 1;
    }
    c->send_inflight = 1;
    c->ops++;
    e->st.sends++;
    return 0;
}

static void finalize_if_idle(Engine *e, hr_conn_t *c)
{
    if (c->state != CS_DEAD || c->ops)
        return;
    struct io_uring_sqe *sqe = hr_ring_sqe(&e->u->ring);
    if (sqe) { /* batched close: no syscall of its own */
        e->st.sqes++;
        sqe->opcode = IORING_OP_CLOSE;
        sqe->fd = c->fd;
        sqe->user_data = ud(e, OP_CLOSE, NULL);
    } else {
        close(c->fd);
        e->st.syscalls++;
    }
    hr_conn_release(e, c);
}

void hr_uring_teardown(Engine *e, hr_conn_t *c, int reason, int err)
{
    if (c->state == CS_FREE || c->state == CS_DEAD)
        return;
    if (err)
        hr_set_reason(c, err);
    else if (!c->close_reason)
        c->close_reason = (uint8_t)reason;
    c->state = CS_DEAD;
    if (c->want_abort) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        e->st.syscalls++;
    }
    /* A failed cancel only delays the release until the op ends by itself. */
    if (c->recv_armed && cancel(e, ud(e, OP_RECV, c)) < 0)
        PyErr_Clear();
    if (c->send_inflight && cancel(e, ud(e, OP_SEND, c)) < 0)
        PyErr_Clear();
    finalize_if_idle(e, c);
}

static int start_linger(Engine *e, hr_conn_t *c)
{
    if (c->eof) {
        hr_uring_teardown(e, c, R_CLOSED, 0);
        return 0;
    }
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -1;
    sqe->opcode = IORING_OP_SHUTDOWN;
    sqe->fd = c->fd;
    sqe->len = SHUT_WR;
    /* Counted in ops: the kernel runs a shutdown in an io-wq worker and looks
     * its fd up only then, so closing the fd first let it shut down the next
     * connection given that number (its answer lost, the client saw EOF). */
    sqe->user_data = ud(e, OP_SHUTDOWN, c);
    c->ops++;
    c->state = CS_LINGER;
    c->last_ms = e->now_ms;
    return want_recv(c) ? arm_recv(e, c) : 0;
}

static hr_conn_t *conn_of(Engine *e, uint64_t user_data)
{
    uint64_t slot = user_data & 0xffffffffULL;
    if (slot >= e->max_conns)
        return NULL;
    hr_conn_t *c = &e->conns[slot];
    if (c->state == CS_FREE || (c->gen & 0xffffffU) != ((user_data >> 32) & 0xffffffU))
        return NULL;
    return c;
}

static int on_accept(Engine *e, int res, unsigned flags)
{
    hr_uring_t *u = e->u;
    int rc = 0;
    if (res >= 0 && (!e->running || e->listen_fd < 0)) { /* no longer accepting */
        close(res);
        e->st.syscalls++;
    } else if (res >= 0) {
        hr_conn_t *c = hr_conn_new(e, res);
        if (!c) { /* taken by a multishot accept past the margin */
            close(res);
            e->st.syscalls++;
            e->st.refused++;
        } else {
            rc = arm_recv(e, c);
            if (rc == 0)
                rc = hr_emit(e, HR_EV_ACCEPTED, c, Py_NewRef(Py_None));
        }
        if (u->accept_multishot && u->accept_armed && !u->accept_cancelling &&
            e->free_top <= ACCEPT_MARGIN) {
            u->accept_cancelling = 1; /* near the cap: re-armed single-shot when it ends */
            if (cancel(e, ud(e, OP_ACCEPT, NULL)) < 0)
                rc = -1;
        }
    } else if (res != -ECANCELED) {
        e->st.accept_errors++;
        if (res == -EMFILE || res == -ENFILE || res == -ENOMEM || res == -ENOBUFS) {
            u->accept_stalled = 1; /* re-arming now would spin: the sweep retries */
            e->st.fd_pauses++;
        }
    }
    if (!(flags & HR_CQE_F_MORE)) {
        u->accept_armed = 0;
        if (e->free_top == 0 && !u->accept_stalled) {
            u->accept_stalled = 1; /* table full: leave the rest in the backlog */
            e->st.accept_pauses++;
        }
        if (!u->accept_stalled && e->running && e->listen_fd >= 0) {
            e->st.rearm_accept++;
            if (hr_uring_arm_accept(e) < 0)
                rc = -1;
        }
    }
    return rc;
}

void hr_uring_slot_freed(Engine *e)
{
    hr_uring_t *u = e->u;
    if (u && u->accept_stalled && !u->accept_armed && e->running && e->listen_fd >= 0) {
        e->st.rearm_accept++;
        if (hr_uring_arm_accept(e) < 0)
            PyErr_Clear(); /* retried at the next free slot */
    }
}

/* From the sweep: after EMFILE/ENFILE no slot of ours may ever free (the fds
 * went elsewhere), so re-arm the accept at the sweep's pace. */
void hr_uring_retry_accept(Engine *e)
{
    if (e->free_top > 0)
        hr_uring_slot_freed(e);
}

static int on_recv_end(Engine *e, hr_conn_t *c, int res)
{
    c->recv_armed = 0;
    c->ops--;
    if (c->state == CS_DEAD) {
        finalize_if_idle(e, c);
        return 0;
    }
    if (res == 0) {
        if (c->state == CS_LINGER) {
            hr_uring_teardown(e, c, R_CLOSED, 0);
            return 0;
        }
        c->eof = 1;
        if (c->state == CS_OPEN)
            return hr_emit(e, HR_EV_EOF, c, Py_NewRef(Py_None));
        return 0;
    }
    if (res < 0 && res != -ENOBUFS && res != -ECANCELED) {
        hr_uring_teardown(e, c, R_ERRNO, -res);
        return 0;
    }
    if (res == -ENOBUFS)
        e->st.enobufs++; /* the ring ran dry: the bytes wait in the socket */
    if (want_recv(c)) {
        if (res != -ECANCELED)
            e->st.rearm_recv++;
        return arm_recv(e, c);
    }
    return 0;
}

static int on_recv(Engine *e, hr_conn_t *c, int res, unsigned flags)
{
    hr_uring_t *u = e->u;
    int rc = 0;
    if (flags & HR_CQE_F_BUFFER) {
        unsigned bid = flags >> HR_CQE_BUFFER_SHIFT;
        u->outstanding++;
        HR_DBG(hr_dbg_bufs, 1);
        if (c && res > 0) {
            if (c->state == CS_OPEN)
                rc = hr_emit_data(e, c, hr_bufring_ptr(&u->br, bid), (size_t)res);
            else
                c->last_ms = e->now_ms; /* closing: discard */
        }
        /* copied out: give it back now; the tail is published once per turn */
        hr_bufring_add(&u->br, bid);
        u->returned++;
        u->outstanding--;
        HR_DBG(hr_dbg_bufs, -1);
    }
    if (c && !(flags & HR_CQE_F_MORE) && on_recv_end(e, c, res) < 0)
        rc = -1;
    return rc;
}

static int on_send(Engine *e, hr_conn_t *c, int res)
{
    c->send_inflight = 0;
    c->ops--;
    if (c->state == CS_DEAD) {
        finalize_if_idle(e, c);
        return 0;
    }
    if (res <= 0) {
        hr_uring_teardown(e, c, R_ERRNO, res == 0 ? EPIPE : -res);
        return 0;
    }
    size_t before = c->q_bytes;
    hr_queue_consume(e, c, (size_t)res);
    if (c->q_head) {
        if ((size_t)res < before && c->q_head->off)
            e->st.partial_sends++;
        return prep_send(e, c); /* continue; submitted with this turn's flush */
    }
    if (c->state == CS_CLOSING)
        return start_linger(e, c);
    return 0;
}

static int dispatch(Engine *e, uint64_t user_data, int res, unsigned flags)
{
    int op = (int)(user_data >> 56);
    hr_conn_t *c =
        (op == OP_RECV || op == OP_SEND || op == OP_SHUTDOWN) ? conn_of(e, user_data) : NULL;
    switch (op) {
    case OP_ACCEPT:
        return on_accept(e, res, flags);
    case OP_RECV:
        return on_recv(e, c, res, flags); /* returns the buffer even if c is gone */
    case OP_SEND:
        return c ? on_send(e, c, res) : 0;
    case OP_SHUTDOWN:
        if (c) {
            c->ops--;
            finalize_if_idle(e, c); /* the close waited for it */
        }
        return 0;
    default:
        return 0; /* cancel / close results need no action */
    }
}

int hr_uring_reap(Engine *e, unsigned max)
{
    hr_ring_t *r = &e->u->ring;
    unsigned ready = hr_ring_cq_ready(r), head = hr_ring_cq_head(r), n;
    int rc = 0;
    for (n = 0; n < ready && n < max; n++) {
        struct io_uring_cqe *cqe = hr_ring_cqe_at(r, head + n);
        if (dispatch(e, cqe->user_data, cqe->res, cqe->flags) < 0)
            rc = -1; /* keep going: every buffer must be returned */
    }
    hr_ring_cq_advance(r, n);
    e->st.cqes += n;
    return rc;
}

int hr_uring_poll(Engine *e, int max_events, int timeout_ms)
{
    hr_uring_t *u = e->u;
    hr_ring_t *r = &u->ring;
    if (u->evfd >= 0) { /* clear before entering: work queued later signals again */
        uint64_t v;
        e->st.syscalls++;
        e->st.eventfd_reads++;
        if (read(u->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    int rc = 0;
    if (timeout_ms != 0 && hr_ring_cq_ready(r) == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = hr_ring_wait(r, timeout_ms < 0 ? 3600000 : timeout_ms);
        Py_END_ALLOW_THREADS
    } else if (hr_ring_sq_pending(r) || (r->flags & HR_SETUP_DEFER_TASKRUN) ||
               hr_ring_cq_ready(r) == 0) {
        rc = hr_ring_enter(r, 0, 1); /* submit + run deferred completions */
    }
    if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN && rc != -ETIME) {
        errno = -rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    rc = hr_uring_reap(e, (unsigned)max_events);
    if (u->returned) {
        hr_bufring_publish(&u->br);
        u->returned = 0;
    }
    return rc;
}

int hr_uring_flush(Engine *e)
{
    uint32_t i = e->dirty_head;
    int rc = 0;
    e->dirty_head = HR_NO_SLOT;
    while (i != HR_NO_SLOT) {
        hr_conn_t *c = &e->conns[i];
        i = c->dirty_next;
        c->in_dirty = 0;
        c->dirty_next = HR_NO_SLOT;
        if ((c->state != CS_OPEN && c->state != CS_CLOSING) || c->send_inflight)
            continue;
        if (c->q_head ? prep_send(e, c) : (c->state == CS_CLOSING ? start_linger(e, c) : 0))
            rc = -1;
    }
    int err = hr_ring_enter(&e->u->ring, 0, 0);
    if (err < 0 && err != -EBUSY && err != -EAGAIN && err != -EINTR && rc == 0) {
        errno = -err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return rc;
}

int hr_uring_set_paused(Engine *e, hr_conn_t *c, int paused)
{
    c->paused = (uint8_t)paused;
    if (paused && c->recv_armed) /* bytes already in flight are still delivered */
        return cancel(e, ud(e, OP_RECV, c));
    if (!paused && want_recv(c))
        return arm_recv(e, c);
    return 0;
}

void hr_uring_stop_accepting(Engine *e)
{
    /* The multishot accept holds its own file reference: closing the fd alone
     * would not stop it, so cancel it; a connection it still hands us is
     * closed in on_accept because listen_fd is then -1. */
    if (e->u->accept_armed && cancel(e, ud(e, OP_ACCEPT, NULL)) < 0)
        PyErr_Clear();
    e->u->accept_stalled = 0;
}

int hr_uring_fileno(Engine *e)
{
    return e->u->evfd >= 0 ? e->u->evfd : e->u->ring.fd;
}

int hr_uring_has_pending(Engine *e)
{
    return hr_ring_cq_ready(&e->u->ring) > 0;
}
