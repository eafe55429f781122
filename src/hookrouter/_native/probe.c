/*
 * Run-time detection of io_uring features.  Every check sets up its own
 * small ring and tears it down; nothing here can leave state behind.  The
 * doctor runs probe() in a child process so that even a seccomp policy that
 * kills on io_uring_setup (SECCOMP_RET_KILL) cannot take the caller down.
 */
#include "engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define PROBE_BGID 7

static int open_loopback_pair(int *listen_fd, int *client_fd)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *client_fd = -1;
    *listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*listen_fd < 0 || bind(*listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(*listen_fd, 4) < 0 || getsockname(*listen_fd, (struct sockaddr *)&sa, &len) < 0)
        return -errno;
    *client_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*client_fd < 0 || connect(*client_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -errno;
    return 0;
}

static void reap_checks(hr_ring_t *r, int *recv_ok, int *accept_ok, int *seen)
{
    unsigned ready = hr_ring_cq_ready(r), head = hr_ring_cq_head(r);
    for (unsigned i = 0; i < ready; i++) {
        struct io_uring_cqe *cqe = hr_ring_cqe_at(r, head + i);
        int more = (cqe->flags & HR_CQE_F_MORE) != 0;
        if (cqe->user_data == 1) {
            *recv_ok = cqe->res == 1 && more && (cqe->flags & HR_CQE_F_BUFFER);
            *seen |= 1;
        } else if (cqe->user_data == 2) {
            *accept_ok = cqe->res >= 0 && more;
            if (cqe->res >= 0)
                close(cqe->res);
            *seen |= 2;
        }
    }
    hr_ring_cq_advance(r, ready);
}

/* Does this kernel do multishot recv with a buffer ring, and multishot
 * accept?  Both complete inline (data and a connection are ready before
 * submission), so the wait is short and bounded. */
int hr_check_multishot(int *recv_ok, int *accept_ok)
{
    hr_ring_t r;
    hr_bufring_t b;
    int sv[2] = {-1, -1}, lfd = -1, cfd = -1, seen = 0;
    *recv_ok = *accept_ok = 0;
    int rc = hr_ring_init(&r, 8, 0, 0);
    if (rc < 0)
        return rc;
    rc = hr_bufring_init(&r, &b, 8, 64, PROBE_BGID, 0);
    if (rc < 0)
        goto out_ring;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || write(sv[1], "x", 1) != 1 ||
        (rc = open_loopback_pair(&lfd, &cfd)) < 0) {
        rc = rc < 0 ? rc : -errno;
        goto out;
    }
    struct io_uring_sqe *sqe = hr_ring_sqe(&r);
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = sv[0];
    sqe->ioprio = HR_RECV_MULTISHOT;
    sqe->flags = IOSQE_BUFFER_SELECT;
    sqe->buf_group = PROBE_BGID;
    sqe->user_data = 1;
    sqe = hr_ring_sqe(&r);
    sqe->opcode = IORING_OP_ACCEPT;
    sqe->fd = lfd;
    sqe->ioprio = HR_ACCEPT_MULTISHOT;
    sqe->user_data = 2;
    hr_ring_enter(&r, 0, 1);
    for (int i = 0; i < 10 && seen != 3; i++) {
        reap_checks(&r, recv_ok, accept_ok, &seen);
        if (seen != 3)
            hr_ring_wait(&r, 20);
    }
    reap_checks(&r, recv_ok, accept_ok, &seen);
    rc = 0;
out:
    int fds[4] = {sv[0], sv[1], lfd, cfd};
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    hr_bufring_exit(&r, &b);
out_ring:
    hr_ring_exit(&r); /* closing the ring cancels the multishot ops */
    return rc;
}

static int try_setup(unsigned flags)
{
    hr_ring_t r;
    int rc = hr_ring_init(&r, 8, 0, flags);
    if (rc == 0)
        hr_ring_exit(&r);
    return -rc;
}

static int try_bufring(hr_ring_t *r, uint16_t bgid, uint16_t flags)
{
    hr_bufring_t b;
    int rc = hr_bufring_init(r, &b, 8, 64, bgid, flags);
    if (rc == 0)
        hr_bufring_exit(r, &b);
    return -rc;
}

/* Register a zero-copy receive interface queue (rx queue 0) and unregister
 * it at once.  Returns 0 on success or the errno the kernel gave. */
static int try_zcrx(const char *ifname, unsigned *ifindex)
{
    *ifindex = if_nametoindex(ifname);
    if (!*ifindex)
        return errno ? errno : ENODEV;
    hr_ring_t r;
    int rc = hr_ring_init(&r, 8, 0, HR_SETUP_SINGLE_ISSUER | HR_SETUP_DEFER_TASKRUN | HR_SETUP_CQE32);
    if (rc < 0)
        return -rc;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), area_len = 16 * page;
    unsigned rq_entries = 64;
    size_t region_len = (page + rq_entries * sizeof(struct hr_zcrx_rqe) + page - 1) & ~(page - 1);
    void *area = mmap(NULL, area_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *region = mmap(NULL, region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int err = ENOMEM;
    if (area != MAP_FAILED && region != MAP_FAILED) {
        struct hr_zcrx_area_reg areg = {.addr = (uint64_t)(uintptr_t)area, .len = area_len};
        struct hr_region_desc rdesc = {.user_addr = (uint64_t)(uintptr_t)region,
                                       .size = region_len, .flags = HR_MEM_REGION_TYPE_USER};
        struct hr_zcrx_ifq_reg reg;
        memset(&reg, 0, sizeof(reg));
        reg.if_idx = *ifindex;
        reg.if_rxq = 0;
        reg.rq_entries = rq_entries;
        reg.area_ptr = (uint64_t)(uintptr_t)&areg;
        reg.region_ptr = (uint64_t)(uintptr_t)&rdesc;
        err = hr_io_uring_register(r.fd, HR_REGISTER_ZCRX_IFQ, &reg, 1) < 0 ? errno : 0;
    }
    hr_ring_exit(&r); /* tears the interface queue down again on success */
    if (area != MAP_FAILED)
        munmap(area, area_len);
    if (region != MAP_FAILED)
        munmap(region, region_len);
    return err;
}

static void put_int(PyObject *d, const char *key, long v)
{
    PyObject *o = PyLong_FromLong(v);
    if (o) {
        PyDict_SetItemString(d, key, o);
        Py_DECREF(o);
    }
}

static void put_ops(PyObject *d, hr_ring_t *r)
{
    size_t sz = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *p = PyMem_Calloc(1, sz);
    if (!p)
        return;
    if (hr_io_uring_register(r->fd, HR_REGISTER_PROBE, p, 256) == 0) {
        put_int(d, "last_op", p->last_op);
        int ops[] = {HR_OP_RECV_ZC, HR_OP_SEND_ZC, HR_OP_BIND, HR_OP_LISTEN};
        const char *names[] = {"op_recv_zc", "op_send_zc", "op_bind", "op_listen"};
        for (int i = 0; i < 4; i++)
            put_int(d, names[i], ops[i] < p->ops_len && (p->ops[ops[i]].flags & IO_URING_OP_SUPPORTED));
    } else {
        put_int(d, "probe_errno", errno);
    }
    PyMem_Free(p);
}

PyObject *hr_probe(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"zcrx_ifname", NULL};
    const char *ifname = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z", kwlist, &ifname))
        return NULL;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    hr_ring_t r;
    int rc = hr_ring_init(&r, 8, 0, 0);
    put_int(d, "setup_errno", rc < 0 ? -rc : 0);
    if (rc < 0)
        return d;
    put_int(d, "features", (long)r.features);
    put_int(d, "bundle", (r.features & HR_FEAT_RECVSEND_BUNDLE) != 0);
    put_ops(d, &r);
    put_int(d, "buf_ring_errno", try_bufring(&r, 1, 0));
    put_int(d, "buf_ring_inc_errno", try_bufring(&r, 2, HR_PBUF_RING_INC));
    hr_ring_exit(&r);
    put_int(d, "defer_taskrun_errno", try_setup(HR_SETUP_SINGLE_ISSUER | HR_SETUP_DEFER_TASKRUN));
    put_int(d, "coop_taskrun_errno", try_setup(HR_SETUP_COOP_TASKRUN));
    int recv_ok = 0, accept_ok = 0;
    rc = hr_check_multishot(&recv_ok, &accept_ok);
    put_int(d, "multishot_errno", rc < 0 ? -rc : 0);
    put_int(d, "multishot_recv", recv_ok);
    put_int(d, "multishot_accept", accept_ok);
    if (ifname) {
        unsigned idx = 0;
        put_int(d, "zcrx_errno", try_zcrx(ifname, &idx));
        put_int(d, "zcrx_ifindex", (long)idx);
    }
    return d;
}
