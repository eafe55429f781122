/* Raw io_uring ring setup and SQ/CQ access; see uring_ring.h. */
#include "uring_ring.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static void *map_ring(int fd, size_t size, off_t off)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap_all(hr_ring_t *r)
{
    if (r->sqe_map)
        munmap(r->sqe_map, r->sqe_map_sz);
    if (r->cq_map && r->cq_map != r->sq_map)
        munmap(r->cq_map, r->cq_map_sz);
    if (r->sq_map)
        munmap(r->sq_map, r->sq_map_sz);
    r->sq_map = r->cq_map = r->sqe_map = NULL;
}

static int map_rings(hr_ring_t *r, const struct io_uring_params *p)
{
    size_t cqe_sz = sizeof(struct io_uring_cqe) << r->cqe_shift;
    r->sq_map_sz = p->sq_off.array + p->sq_entries * sizeof(unsigned);
    r->cq_map_sz = p->cq_off.cqes + p->cq_entries * cqe_sz;
    if (p->features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_map_sz > r->sq_map_sz)
            r->sq_map_sz = r->cq_map_sz;
        r->cq_map_sz = r->sq_map_sz;
    }
    r->sq_map = map_ring(r->fd, r->sq_map_sz, IORING_OFF_SQ_RING);
    if (!r->sq_map)
        return -errno;
    if (p->features & IORING_FEAT_SINGLE_MMAP) {
        r->cq_map = r->sq_map;
    } else if (!(r->cq_map = map_ring(r->fd, r->cq_map_sz, IORING_OFF_CQ_RING))) {
        return -errno;
    }
    r->sqe_map_sz = p->sq_entries * sizeof(struct io_uring_sqe);
    r->sqe_map = map_ring(r->fd, r->sqe_map_sz, IORING_OFF_SQES);
    if (!r->sqe_map)
        return -errno;
    return 0;
}

int hr_ring_init(hr_ring_t *r, unsigned entries, unsigned cq_entries, unsigned flags)
{
    struct io_uring_params p;
    memset(r, 0, sizeof(*r));
    memset(&p, 0, sizeof(p));
    p.flags = flags;
    if (cq_entries) {
        p.flags |= HR_SETUP_CQSIZE;
        p.cq_entries = cq_entries;
    }
    r->fd = hr_io_uring_setup(entries, &p);
    if (r->fd < 0) {
        r->fd = -1;
        return -errno;
    }
    r->flags = p.flags;
    r->features = p.features;
    r->cqe_shift = (p.flags & HR_SETUP_CQE32) ? 1 : 0;
    int err = map_rings(r, &p);
    if (err) {
        unmap_all(r);
        close(r->fd);
        r->fd = -1;
        return err;
    }
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_flags = (unsigned *)(sq + p.sq_off.flags);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->sq_entries = p.sq_entries;
    r->sqes = r->sqe_map;
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    r->cq_entries = p.cq_entries;
    /* Identity SQ index array, filled once: slot i always names SQE i. */
    for (unsigned i = 0; i < p.sq_entries; i++)
        r->sq_array[i] = i;
    r->sq_local_tail = *r->sq_tail;
    return 0;
}

void hr_ring_exit(hr_ring_t *r)
{
    if (r->fd < 0)
        return;
    unmap_all(r);
    close(r->fd);
    r->fd = -1;
}

unsigned hr_ring_sq_pending(const hr_ring_t *r)
{
    return r->sq_local_tail - LOAD_ACQ(r->sq_head);
}

int hr_ring_enter(hr_ring_t *r, unsigned min_complete, int getevents)
{
    STORE_REL(r->sq_tail, r->sq_local_tail);
    unsigned to_submit = hr_ring_sq_pending(r);
    if (!to_submit && !getevents)
        return 0;
    r->enters++;
    int ret;
    do {
        ret = hr_io_uring_enter(r->fd, to_submit, min_complete,
                                getevents ? IORING_ENTER_GETEVENTS : 0);
    } while (ret < 0 && errno == EINTR);
    return ret < 0 ? -errno : ret;
}

struct io_uring_sqe *hr_ring_sqe(hr_ring_t *r)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        unsigned head = LOAD_ACQ(r->sq_head);
        if (r->sq_local_tail - head < r->sq_entries) {
            struct io_uring_sqe *sqe = &r->sqes[r->sq_local_tail & *r->sq_mask];
            r->sq_local_tail++;
            memset(sqe, 0, sizeof(*sqe));
            return sqe;
        }
        if (hr_ring_enter(r, 0, 0) < 0)
            return NULL;
    }
    return NULL;
}

unsigned hr_ring_cq_head(const hr_ring_t *r)
{
    return *r->cq_head;
}

unsigned hr_ring_cq_ready(const hr_ring_t *r)
{
    return LOAD_ACQ(r->cq_tail) - *r->cq_head;
}

struct io_uring_cqe *hr_ring_cqe_at(const hr_ring_t *r, unsigned head)
{
    return &r->cqes[(head & *r->cq_mask) << r->cqe_shift];
}

void hr_ring_cq_advance(hr_ring_t *r, unsigned n)
{
    if (n)
        STORE_REL(r->cq_head, *r->cq_head + n);
}

/* -- provided buffer ring ------------------------------------------------ */

int hr_bufring_init(hr_ring_t *r, hr_bufring_t *b, unsigned count, unsigned size, uint16_t bgid,
                    uint16_t flags)
{
    memset(b, 0, sizeof(*b));
    if (count == 0 || count > 32768 || (count & (count - 1)))
        return -EINVAL; /* the kernel requires a power of two up to 32768 */
    b->entries = count;
    b->mask = count - 1;
    b->size = size;
    b->bgid = bgid;
    b->ring_sz = (size_t)count * sizeof(struct hr_buf);
    void *ring = mmap(NULL, b->ring_sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED)
        return -errno;
    b->ring = ring;
    b->data_sz = (size_t)count * size;
    if (b->data_sz) {
        void *data = mmap(NULL, b->data_sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
        if (data == MAP_FAILED) {
            int err = -errno;
            hr_bufring_exit(r, b);
            return err;
        }
        b->data = data;
    }
    struct hr_buf_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)b->ring;
    reg.ring_entries = count;
    reg.bgid = bgid;
    reg.flags = flags;
    if (hr_io_uring_register(r->fd, HR_REGISTER_PBUF_RING, &reg, 1) < 0) {
        int err = -errno;
        hr_bufring_exit(r, b);
        return err;
    }
    b->registered = 1;
    if (b->data) {
        for (unsigned i = 0; i < count; i++)
            hr_bufring_add(b, i);
        hr_bufring_publish(b);
    }
    return 0;
}

void hr_bufring_add(hr_bufring_t *b, unsigned bid)
{
    struct hr_buf *buf = &b->ring[b->tail & b->mask];
    buf->addr = (uint64_t)(uintptr_t)hr_bufring_ptr(b, bid);
    buf->len = b->size;
    buf->bid = (uint16_t)bid;
    b->tail++;
}

void hr_bufring_publish(hr_bufring_t *b)
{
    /* The tail overlays bufs[0].resv: one release store makes every buffer
     * added since the last publish visible to the kernel. */
    uint16_t *tail = &b->ring[0].resv;
    STORE_REL(tail, b->tail);
}

void hr_bufring_exit(hr_ring_t *r, hr_bufring_t *b)
{
    if (b->registered && r->fd >= 0) {
        struct hr_buf_reg reg;
        memset(&reg, 0, sizeof(reg));
        reg.bgid = b->bgid;
        hr_io_uring_register(r->fd, HR_UNREGISTER_PBUF_RING, &reg, 1);
    }
    b->registered = 0;
    if (b->data)
        munmap(b->data, b->data_sz);
    if (b->ring)
        munmap(b->ring, b->ring_sz);
    b->data = NULL;
    b->ring = NULL;
}

int hr_ring_wait(hr_ring_t *r, int timeout_ms)
{
    STORE_REL(r->sq_tail, r->sq_local_tail);
    if (!(r->features & HR_FEAT_EXT_ARG))
        return hr_ring_enter(r, 0, 1);
    struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                                   .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
    struct io_uring_getevents_arg arg;
    memset(&arg, 0, sizeof(arg));
    arg.ts = (uint64_t)(uintptr_t)&ts;
    r->enters++;
    int ret = (int)syscall(__NR_io_uring_enter, r->fd, hr_ring_sq_pending(r), 1,
                           IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof(arg));
    return ret < 0 ? -errno : 0;
}
