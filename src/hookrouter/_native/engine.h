/*
 * Shared state of the batch transport (engine.c) and its two backends
 * (backend_epoll.c, backend_uring.c).
 *
 * Connections live in a fixed table of max_conns slots.  A connection id is
 * (generation << 32) | slot; the generation is bumped whenever a slot is
 * released, so an id held by Python after its connection died never matches
 * a new connection that reuses the slot (or the fd number).
 *
 * Every ACCEPTED event is matched by exactly one CLOSED event; DATA and EOF
 * come in between.  Methods taking a stale id do nothing and return False.
 *
 * Connection states:
 *   OPEN     reading and writing
 *   CLOSING  Python asked for a graceful close: flush queued sends first
 *   LINGER   sends flushed, write side shut down; reading and discarding until
 *            the peer's FIN (so unread input cannot turn our FIN into an RST
 *            that destroys the response in flight, as nginx's lingering close)
 *   DEAD     being torn down: waiting for the kernel to finish in-flight ops
 */
#ifndef HR_ENGINE_H
#define HR_ENGINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "uring_ring.h"

enum { HR_EV_ACCEPTED = 1, HR_EV_DATA = 2, HR_EV_EOF = 3, HR_EV_CLOSED = 4, HR_EV_DRAINED = 5 };
enum { CS_FREE = 0, CS_OPEN, CS_CLOSING, CS_LINGER, CS_DEAD };
enum { BK_EPOLL = 0, BK_URING = 1 };
/* close reasons; R_ERRNO carries the errno in conn->close_errno */
enum { R_NONE = 0, R_CLOSED, R_ABORTED, R_RESET, R_TIMEOUT, R_SHUTDOWN, R_ERRNO };

#define HR_NO_SLOT UINT32_MAX
#define HR_IOV_MAX 16 /* chunks coalesced into one send; responses are few per turn */

typedef struct hr_chunk {
    struct hr_chunk *next;
    PyObject *obj; /* a bytes object: immutable, so the kernel may read it later */
    Py_ssize_t off;
} hr_chunk_t;

typedef struct hr_conn {
    int fd;
    uint32_t gen;
    uint8_t state, paused, eof, in_dirty, above_hwm, want_abort;
    uint8_t recv_armed, send_inflight; /* io_uring ops the kernel holds */
    uint8_t close_reason;
    int close_errno;
    uint32_t ev_mask; /* epoll interest currently registered */
    uint32_t dirty_next;
    uint32_t ops; /* in-flight io_uring ops naming this slot */
    uint32_t sent_chunks; /* chunks covered by the in-flight send */
    hr_chunk_t *q_head, *q_tail;
    size_t q_bytes;
    uint32_t q_count;
    int64_t last_ms;
    struct msghdr msg; /* io_uring sendmsg: must stay valid until the CQE */
    struct iovec iov[HR_IOV_MAX];
} hr_conn_t;

typedef struct hr_stats {
    uint64_t accepted, closed, refused, cqes, sqes, rearm_recv, rearm_accept, enobufs;
    uint64_t bytes_in, bytes_out, recv_events, sends, partial_sends, syscalls, timeouts;
    uint64_t eventfd_reads, accept_errors, accept_pauses, fd_pauses;
} hr_stats_t;

typedef struct hr_uring {
    hr_ring_t ring;
    hr_bufring_t br;
    int evfd;            /* eventfd registered with the ring, or -1 */
    int notify_ring;     /* fileno() is the ring fd itself instead */
    int accept_armed;    /* an accept (multishot or single) in flight */
    int accept_multishot; /* ... and it is multishot */
    int accept_cancelling; /* near the cap: its cancel is submitted */
    int accept_stalled;  /* EMFILE/ENFILE or table full: wait for a free slot */
    unsigned returned;   /* buffers queued for return this turn */
    uint64_t outstanding; /* buffers taken from the ring, not yet given back */
    unsigned probe_flags; /* setup flags actually used */
} hr_uring_t;

typedef struct Engine {
    PyObject_HEAD
    int backend;
    int listen_fd;
    int running;
    hr_conn_t *conns;
    uint32_t max_conns, nconns;
    uint32_t *free_stack;
    uint32_t free_top;
    uint32_t dirty_head;
    PyObject *events; /* list of (kind, conn_id, payload) collected for the next poll */
    uint32_t buf_size, buf_count;
    size_t high_water, low_water;
    int64_t now_ms, idle_timeout_ms, linger_ms;
    hr_stats_t st;
    int epfd;            /* epoll backend */
    int accept_paused;   /* epoll: listener interest removed (table full / EMFILE) */
    char *scratch;       /* epoll receive buffer */
    void *evbuf;         /* epoll_event array */
    size_t scratch_sz;
    hr_uring_t *u;       /* io_uring backend */
} Engine;

/* engine.c: shared connection bookkeeping */
uint64_t hr_conn_id(const Engine *e, const hr_conn_t *c);
hr_conn_t *hr_conn_new(Engine *e, int fd); /* NULL when the table is full */
void hr_conn_release(Engine *e, hr_conn_t *c); /* frees the slot, emits CLOSED */
void hr_conn_mark_dirty(Engine *e, hr_conn_t *c);
int hr_emit(Engine *e, int kind, hr_conn_t *c, PyObject *payload); /* steals payload */
int hr_emit_data(Engine *e, hr_conn_t *c, const char *buf, size_t n);
void hr_queue_consume(Engine *e, hr_conn_t *c, size_t n); /* drop n sent bytes */
void hr_queue_clear(hr_conn_t *c);
void hr_set_reason(hr_conn_t *c, int err); /* map a negative-free errno to a reason */

/* Live resource counters, process-wide; all zero once every engine is torn
 * down (tests assert it).  Compiled into every build, not only the debug
 * one: they are a handful of integer adds per connection/chunk/buffer, and a
 * leak check that only runs in a special build catches nothing in CI's
 * ordinary run.  HR_DEBUG adds -O1 -g and is what the ASan build uses. */
extern long hr_dbg_conns, hr_dbg_chunks, hr_dbg_bufs, hr_dbg_engines;
#define HR_DBG(var, delta) ((var) += (delta))

/* backends: each returns 0, or -1 with a Python exception set */
int hr_epoll_init(Engine *e);
int hr_epoll_poll(Engine *e, int max_events, int timeout_ms);
int hr_epoll_flush(Engine *e);
void hr_epoll_teardown(Engine *e, hr_conn_t *c, int reason, int err);
int hr_epoll_set_paused(Engine *e, hr_conn_t *c, int paused);
void hr_epoll_destroy(Engine *e);
void hr_epoll_slot_freed(Engine *e);
void hr_epoll_retry_accept(Engine *e);

int hr_uring_init(Engine *e, unsigned ring_entries, int notify_ring);
int hr_uring_poll(Engine *e, int max_events, int timeout_ms);
int hr_uring_flush(Engine *e);
void hr_uring_teardown(Engine *e, hr_conn_t *c, int reason, int err);
int hr_uring_set_paused(Engine *e, hr_conn_t *c, int paused);
void hr_uring_destroy(Engine *e);
int hr_uring_fileno(Engine *e);
void hr_uring_stop_accepting(Engine *e);
int hr_uring_has_pending(Engine *e);
void hr_uring_slot_freed(Engine *e);
void hr_uring_retry_accept(Engine *e);
PyObject *hr_uring_info(Engine *e);
int hr_uring_arm_accept(Engine *e);
int hr_uring_reap(Engine *e, unsigned max);
int hr_check_multishot(int *recv_ok, int *accept_ok); /* probe.c: 0 or -errno */

/* probe.c */
PyObject *hr_probe(PyObject *self, PyObject *args, PyObject *kwargs);

#endif
