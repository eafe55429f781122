/*
 * A minimal io_uring ring over raw syscalls (no liburing): mmap the SQ/CQ
 * rings, hand out SQEs, submit, walk CQEs; plus a provided-buffer ring.
 * Single-threaded by design (the engine is driven by one event loop thread),
 * so the only ordering we need is acquire/release against the kernel.
 */
#ifndef HR_URING_RING_H
#define HR_URING_RING_H

#include <stddef.h>
#include <stdint.h>

#include "uring_abi.h"

typedef struct hr_ring {
    int fd;
    unsigned flags;    /* setup flags the kernel accepted */
    unsigned features; /* IORING_FEAT_* */
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_flags, *sq_array;
    unsigned sq_entries, sq_local_tail;
    struct io_uring_sqe *sqes;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    unsigned cq_entries, cqe_shift; /* shift 1 with CQE32 */
    void *sq_map, *cq_map, *sqe_map;
    size_t sq_map_sz, cq_map_sz, sqe_map_sz;
    uint64_t enters; /* io_uring_enter calls made */
} hr_ring_t;

typedef struct hr_bufring {
    struct hr_buf *ring;
    size_t ring_sz;
    char *data;
    size_t data_sz;
    unsigned entries, mask, size;
    uint16_t tail, bgid;
    int registered;
} hr_bufring_t;

/* 0 or -errno; on failure nothing is left open. */
int hr_ring_init(hr_ring_t *r, unsigned entries, unsigned cq_entries, unsigned flags);
void hr_ring_exit(hr_ring_t *r);
/* Next free SQE, zeroed; submits to make room when full; NULL if still full. */
struct io_uring_sqe *hr_ring_sqe(hr_ring_t *r);
unsigned hr_ring_sq_pending(const hr_ring_t *r);
/* Submit pending SQEs; with getevents also run deferred task work and wait
 * for min_complete CQEs.  Returns submitted count or -errno. */
int hr_ring_enter(hr_ring_t *r, unsigned min_complete, int getevents);
unsigned hr_ring_cq_ready(const hr_ring_t *r);
struct io_uring_cqe *hr_ring_cqe_at(const hr_ring_t *r, unsigned head);
unsigned hr_ring_cq_head(const hr_ring_t *r);
void hr_ring_cq_advance(hr_ring_t *r, unsigned n);

int hr_bufring_init(hr_ring_t *r, hr_bufring_t *b, unsigned count, unsigned size, uint16_t bgid,
                    uint16_t flags);
void hr_bufring_exit(hr_ring_t *r, hr_bufring_t *b);
/* Queue buffer bid for return; visible to the kernel after publish. */
void hr_bufring_add(hr_bufring_t *b, unsigned bid);
void hr_bufring_publish(hr_bufring_t *b);
static inline char *hr_bufring_ptr(const hr_bufring_t *b, unsigned bid)
{
    return b->data + (size_t)bid * b->size;
}



/* Wait up to timeout_ms for at least one CQE (needs IORING_FEAT_EXT_ARG;
 * without it only submits and runs task work).  Returns 0 or -errno. */
int hr_ring_wait(hr_ring_t *r, int timeout_ms);
#endif
