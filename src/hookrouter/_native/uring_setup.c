/* io_uring backend: ring setup with feature fallback, teardown, info. */
#include "engine.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>


/* Most capable first; EINVAL means "this kernel does not know a flag". */
static const unsigned SETUP_TRIES[] = {
    HR_SETUP_SINGLE_ISSUER | HR_SETUP_DEFER_TASKRUN | HR_SETUP_SUBMIT_ALL,
    HR_SETUP_COOP_TASKRUN | HR_SETUP_TASKRUN_FLAG | HR_SETUP_SUBMIT_ALL,
    HR_SETUP_SUBMIT_ALL,
    0,
};

static int fail_errno(int err, const char *what)
{
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", err, what);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

/* With DEFER_TASKRUN completions wait as task work until we enter the
 * kernel; the ring fd does not become readable for that (only the eventfd is
 * signalled), so the ring-fd notification mode starts at COOP_TASKRUN. */
static int setup_ring(hr_uring_t *u, unsigned entries, int notify_ring)
{
    unsigned cq = entries * 4; /* multishot recv posts many CQEs per SQE */
    if (cq > 65536)
        cq = 65536;
    int rc = -EINVAL;
    for (size_t i = notify_ring ? 1 : 0; i < sizeof(SETUP_TRIES) / sizeof(SETUP_TRIES[0]); i++) {
        rc = hr_ring_init(&u->ring, entries, cq, SETUP_TRIES[i]);
        if (rc != -EINVAL)
            break;
    }
    return rc;
}

int hr_uring_init(Engine *e, unsigned ring_entries, int notify_ring)
{
    hr_uring_t *u = PyMem_Calloc(1, sizeof(*u));
    if (!u) {
        PyErr_NoMemory();
        return -1;
    }
    e->u = u;
    u->evfd = -1;
    u->ring.fd = -1;
    u->notify_ring = notify_ring;
    int rc = setup_ring(u, ring_entries, notify_ring);
    if (rc < 0) {
        fail_errno(-rc, "io_uring_setup failed");
        goto fail;
    }
    int recv_ms = 0, accept_ms = 0;
    rc = hr_check_multishot(&recv_ms, &accept_ms);
    if (rc < 0 || !recv_ms || !accept_ms) {
        fail_errno(rc < 0 ? -rc : EOPNOTSUPP,
                   "io_uring multishot accept/recv not supported by this kernel");
        goto fail;
    }
    rc = hr_bufring_init(&u->ring, &u->br, e->buf_count, e->buf_size, 0, 0);
    if (rc < 0) {
        fail_errno(-rc, "io_uring provided buffer ring registration failed");
        goto fail;
    }
    if (!notify_ring) {
        u->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (u->evfd < 0 || hr_io_uring_register(u->ring.fd, HR_REGISTER_EVENTFD, &u->evfd, 1) < 0) {
            fail_errno(errno, "io_uring eventfd registration failed");
            goto fail;
        }
    }
    if (hr_uring_arm_accept(e) < 0 || hr_ring_enter(&u->ring, 0, 0) < 0) {
        if (!PyErr_Occurred())
            fail_errno(errno, "io_uring submit failed");
        goto fail;
    }
    return 0;
fail:
    hr_uring_destroy(e);
    return -1;
}

/* Cancel everything the kernel holds and wait (bounded) for the CQEs, so no
 * send can still read a Python buffer and no recv can write a ring buffer
 * once they are freed. */
static void drain_kernel(Engine *e)
{
    hr_uring_t *u = e->u;
    struct io_uring_sqe *sqe = hr_ring_sqe(&u->ring);
    if (sqe) {
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->fd = -1;
        sqe->cancel_flags = HR_ASYNC_CANCEL_ANY | HR_ASYNC_CANCEL_ALL;
        sqe->user_data = (uint64_t)4 << 56; /* OP_CANCEL */
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        uint64_t busy = u->accept_armed;
        for (uint32_t i = 0; i < e->max_conns; i++)
            busy += e->conns[i].ops;
        hr_ring_enter(&u->ring, 0, 1);
        if (hr_uring_reap(e, UINT32_MAX) < 0)
            PyErr_Clear();
        if (!busy)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > 1000)
            break; /* the kernel is stuck on something: do not hang shutdown */
        hr_ring_wait(&u->ring, 50);
    }
    if (u->returned) {
        hr_bufring_publish(&u->br);
        u->returned = 0;
    }
    hr_ring_enter(&u->ring, 0, 0); /* the CLOSE ops queued by the last releases */
}

void hr_uring_destroy(Engine *e)
{
    hr_uring_t *u = e->u;
    if (!u)
        return;
    for (uint32_t i = 0; e->conns && i < e->max_conns; i++) {
        hr_conn_t *c = &e->conns[i];
        if (c->state != CS_FREE && !c->close_reason)
            c->close_reason = R_SHUTDOWN;
        if (c->state != CS_FREE)
            c->state = CS_DEAD;
    }
    if (u->ring.fd >= 0)
        drain_kernel(e);
    for (uint32_t i = 0; e->conns && i < e->max_conns; i++) {
        hr_conn_t *c = &e->conns[i];
        if (c->state == CS_FREE)
            continue;
        close(c->fd);
        if (c->ops) { /* kernel did not give it back: leak rather than free in use */
            c->q_head = c->q_tail = NULL;
            c->q_count = 0;
            c->q_bytes = 0;
        }
        c->ops = 0;
        hr_conn_release(e, c);
    }
    hr_bufring_exit(&u->ring, &u->br);
    hr_ring_exit(&u->ring);
    if (u->evfd >= 0)
        close(u->evfd);
    PyMem_Free(u);
    e->u = NULL;
}

PyObject *hr_uring_info(Engine *e)
{
    hr_uring_t *u = e->u;
    unsigned f = u->ring.flags;
    return Py_BuildValue(
        "{s:s,s:I,s:I,s:I,s:O,s:O,s:O,s:O,s:s,s:I,s:I}", "backend", "io_uring", "setup_flags", f,
        "sq_entries", u->ring.sq_entries, "cq_entries", u->ring.cq_entries, "single_issuer",
        (f & HR_SETUP_SINGLE_ISSUER) ? Py_True : Py_False, "defer_taskrun",
        (f & HR_SETUP_DEFER_TASKRUN) ? Py_True : Py_False, "coop_taskrun",
        (f & HR_SETUP_COOP_TASKRUN) ? Py_True : Py_False, "bundle_feature",
        (u->ring.features & HR_FEAT_RECVSEND_BUNDLE) ? Py_True : Py_False, "notify",
        u->evfd >= 0 ? "eventfd" : "ring", "buf_count", u->br.entries, "buf_size", u->br.size);
}
