/*
 * epoll backend: accept4 + recv + sendmsg, level-triggered.
 *
 * Why level-triggered: poll() bounds its work per turn (max_events, one recv
 * of up to 64 KiB per ready socket), and with LT whatever is left is simply
 * reported again on the next turn, so no connection can starve the others
 * and we keep no "still readable" list.  Edge-triggered would force a recv
 * until EAGAIN on every event, one wasted syscall per request (a 1 KB webhook
 * fits one recv).  Interest changes (pause, EPOLLOUT while a send is blocked,
 * EOF) cost one epoll_ctl each but are rare on the request path.
 */
#include "engine.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define LISTEN_TAG UINT64_MAX
#define EV_CAP 1024        /* epoll_wait batch; more is reported next turn */
#define SCRATCH (64 * 1024) /* one recv per ready socket per turn */
#define ACCEPT_BATCH 64     /* accepts per turn before serving the others */

static uint32_t want_mask(const hr_conn_t *c)
{
    uint32_t m = 0;
    int reading = c->state == CS_OPEN ? !c->paused : (c->state == CS_CLOSING || c->state == CS_LINGER);
    if (reading && !c->eof)
        m |= EPOLLIN;
    if (c->send_inflight) /* a send hit EAGAIN: wait until writable */
        m |= EPOLLOUT;
    return m;
}

static int update_mask(Engine *e, hr_conn_t *c)
{
    uint32_t m = want_mask(c);
    if (m == c->ev_mask)
        return 0;
    struct epoll_event ev = {.events = m, .data.u64 = hr_conn_id(e, c)};
    e->st.syscalls++;
    if (epoll_ctl(e->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        return -errno;
    c->ev_mask = m;
    return 0;
}

static void set_listener(Engine *e, int on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.u64 = LISTEN_TAG};
    e->st.syscalls++;
    epoll_ctl(e->epfd, EPOLL_CTL_MOD, e->listen_fd, &ev);
    e->accept_paused = !on;
}

void hr_epoll_slot_freed(Engine *e)
{
    if (e->accept_paused && e->running && e->listen_fd >= 0)
        set_listener(e, 1);
}

/* From the sweep: after EMFILE/ENFILE no slot of ours may ever free (the fds
 * went elsewhere), so watch the listener again at the sweep's pace. */
void hr_epoll_retry_accept(Engine *e)
{
    if (e->free_top > 0)
        hr_epoll_slot_freed(e);
}

int hr_epoll_init(Engine *e)
{
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    e->scratch_sz = SCRATCH;
    e->scratch = PyMem_Malloc(SCRATCH);
    e->evbuf = PyMem_Malloc(EV_CAP * sizeof(struct epoll_event));
    if (!e->scratch || !e->evbuf) {
        PyErr_NoMemory();
        hr_epoll_destroy(e);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LISTEN_TAG};
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->listen_fd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        hr_epoll_destroy(e);
        return -1;
    }
    return 0;
}

void hr_epoll_teardown(Engine *e, hr_conn_t *c, int reason, int err)
{
    if (c->state == CS_FREE || c->state == CS_DEAD)
        return;
    c->state = CS_DEAD;
    if (err)
        hr_set_reason(c, err);
    else if (!c->close_reason)
        c->close_reason = (uint8_t)reason;
    if (c->want_abort) { /* RST instead of FIN: the peer learns at once */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        e->st.syscalls++;
    }
    close(c->fd); /* also drops it from the epoll set */
    e->st.syscalls++;
    hr_conn_release(e, c);
}

static void start_linger(Engine *e, hr_conn_t *c)
{
    if (c->eof) { /* the peer is done too: nothing to wait for */
        hr_epoll_teardown(e, c, R_CLOSED, 0);
        return;
    }
    e->st.syscalls++;
    if (shutdown(c->fd, SHUT_WR) < 0) {
        hr_epoll_teardown(e, c, R_CLOSED, 0);
        return;
    }
    c->state = CS_LINGER;
    c->last_ms = e->now_ms;
    update_mask(e, c);
}

/* Write as much of the queue as the socket takes now. */
static void flush_conn(Engine *e, hr_conn_t *c)
{
    while (c->q_head) {
        struct iovec iov[HR_IOV_MAX];
        struct msghdr msg;
        size_t total = 0;
        int k = 0;
        for (hr_chunk_t *ch = c->q_head; ch && k < HR_IOV_MAX; ch = ch->next, k++) {
            iov[k].iov_base = PyBytes_AS_STRING(ch->obj) + ch->off;
            iov[k].iov_len = (size_t)(PyBytes_GET_SIZE(ch->obj) - ch->off);
            total += iov[k].iov_len;
        }
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)k;
        e->st.syscalls++;
        e->st.sends++;
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                c->send_inflight = 1;
                update_mask(e, c);
                return;
            }
            hr_epoll_teardown(e, c, R_ERRNO, errno);
            return;
        }
        hr_queue_consume(e, c, (size_t)n);
        if ((size_t)n < total) { /* socket buffer full: wait for EPOLLOUT */
            e->st.partial_sends++;
            c->send_inflight = 1;
            update_mask(e, c);
            return;
        }
    }
    c->send_inflight = 0;
    if (c->state == CS_CLOSING)
        start_linger(e, c);
    else
        update_mask(e, c);
}

static int do_read(Engine *e, hr_conn_t *c)
{
    e->st.syscalls++;
    ssize_t n = recv(c->fd, e->scratch, e->scratch_sz, 0);
    if (n > 0) {
        if (c->state == CS_OPEN)
            return hr_emit_data(e, c, e->scratch, (size_t)n);
        c->last_ms = e->now_ms; /* closing: discard what the peer still sends */
        return 0;
    }
    if (n == 0) {
        if (c->state == CS_LINGER) {
            hr_epoll_teardown(e, c, R_CLOSED, 0);
            return 0;
        }
        c->eof = 1;
        update_mask(e, c);
        if (c->state == CS_OPEN)
            return hr_emit(e, HR_EV_EOF, c, Py_NewRef(Py_None));
        return 0;
    }
    if (errno != EAGAIN && errno != EINTR)
        hr_epoll_teardown(e, c, R_ERRNO, errno);
    return 0;
}

static void do_accept(Engine *e)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (e->free_top == 0) { /* table full: leave the rest in the kernel backlog */
            e->st.accept_pauses++;
            set_listener(e, 0);
            return;
        }
        e->st.syscalls++;
        int fd = accept4(e->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN)
                return;
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            /* EMFILE/ENFILE/ENOMEM: stop accepting until a slot frees, or
             * level-triggered epoll would spin on the pending connection. */
            e->st.accept_errors++;
            e->st.fd_pauses++;
            set_listener(e, 0);
            return;
        }
        hr_conn_t *c = hr_conn_new(e, fd);
        if (!c) { /* unreachable: free_top was checked */
            close(fd);
            e->st.refused++;
            set_listener(e, 0);
            return;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = hr_conn_id(e, c)};
        e->st.syscalls++;
        if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            hr_epoll_teardown(e, c, R_ERRNO, errno);
            continue;
        }
        c->ev_mask = EPOLLIN;
        hr_emit(e, HR_EV_ACCEPTED, c, Py_NewRef(Py_None));
    }
}

static int on_conn_event(Engine *e, hr_conn_t *c, uint32_t ev)
{
    uint32_t gen = c->gen;
    if ((ev & EPOLLIN) && do_read(e, c) < 0)
        return -1;
    if (c->gen != gen || c->state == CS_FREE)
        return 0; /* torn down while reading */
    if ((ev & EPOLLOUT) && c->send_inflight) {
        c->send_inflight = 0;
        flush_conn(e, c);
        if (c->gen != gen || c->state == CS_FREE)
            return 0;
    }
    if ((ev & (EPOLLERR | EPOLLHUP)) && !(ev & EPOLLIN)) {
        /* Not reading (paused or after EOF) but the socket is dead: level-
         * triggered HUP/ERR would be reported forever, so close now. */
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        hr_epoll_teardown(e, c, R_RESET, err);
    }
    return 0;
}

int hr_epoll_poll(Engine *e, int max_events, int timeout_ms)
{
    struct epoll_event *evs = e->evbuf;
    int cap = max_events < EV_CAP ? max_events : EV_CAP, n;
    e->st.syscalls++;
    if (timeout_ms != 0) {
        Py_BEGIN_ALLOW_THREADS
        n = epoll_wait(e->epfd, evs, cap, timeout_ms);
        Py_END_ALLOW_THREADS
    } else {
        n = epoll_wait(e->epfd, evs, cap, 0);
    }
    if (n < 0) {
        if (errno == EINTR)
            return 0;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64;
        if (tag == LISTEN_TAG) {
            do_accept(e);
            continue;
        }
        uint64_t slot = tag & 0xffffffffULL;
        hr_conn_t *c = &e->conns[slot];
        if (slot >= e->max_conns || c->state == CS_FREE || c->gen != (uint32_t)(tag >> 32))
            continue; /* closed earlier in this batch */
        if (on_conn_event(e, c, evs[i].events) < 0)
            return -1;
    }
    return 0;
}

int hr_epoll_flush(Engine *e)
{
    uint32_t i = e->dirty_head;
    e->dirty_head = HR_NO_SLOT;
    while (i != HR_NO_SLOT) {
        hr_conn_t *c = &e->conns[i];
        i = c->dirty_next;
        c->in_dirty = 0;
        c->dirty_next = HR_NO_SLOT;
        if ((c->state == CS_OPEN || c->state == CS_CLOSING) && !c->send_inflight)
            flush_conn(e, c);
    }
    return 0;
}

int hr_epoll_set_paused(Engine *e, hr_conn_t *c, int paused)
{
    c->paused = (uint8_t)paused;
    int err = update_mask(e, c);
    if (err) {
        errno = -err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

void hr_epoll_destroy(Engine *e)
{
    for (uint32_t i = 0; e->conns && i < e->max_conns; i++) {
        hr_conn_t *c = &e->conns[i];
        if (c->state != CS_FREE && c->state != CS_DEAD)
            hr_epoll_teardown(e, c, R_SHUTDOWN, 0);
    }
    if (e->epfd >= 0)
        close(e->epfd);
    e->epfd = -1;
    PyMem_Free(e->scratch);
    PyMem_Free(e->evbuf);
    e->scratch = NULL;
    e->evbuf = NULL;
}
