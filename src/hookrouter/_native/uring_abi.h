/*
 * io_uring ABI pieces newer than the distribution's UAPI header.
 *
 * Debian 12 ships the 6.1 <linux/io_uring.h>; the running kernel may be much
 * newer.  We include the system header for the stable core (SQE/CQE layout,
 * setup params) and define here, under HR_ names, every later constant and
 * struct we use.  Nothing here is assumed to exist: each feature is detected
 * at run time (see uring_ring.c / probe.c) and the engine falls back or
 * reports the errno.  Values are from the upstream UAPI header.
 */
#ifndef HR_URING_ABI_H
#define HR_URING_ABI_H

#include <linux/io_uring.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif

/* setup flags (5.19 .. 6.1 are in the 6.1 header; keep guards anyway) */
#define HR_SETUP_CQSIZE (1U << 3)
#define HR_SETUP_SUBMIT_ALL (1U << 7)
#define HR_SETUP_COOP_TASKRUN (1U << 8)
#define HR_SETUP_TASKRUN_FLAG (1U << 9)
#define HR_SETUP_CQE32 (1U << 11)
#define HR_SETUP_SINGLE_ISSUER (1U << 12)
#define HR_SETUP_DEFER_TASKRUN (1U << 13)

/* feature bits returned in io_uring_params.features */
#define HR_FEAT_NODROP (1U << 1)
#define HR_FEAT_FAST_POLL (1U << 5)
#define HR_FEAT_EXT_ARG (1U << 8)
#define HR_FEAT_CQE_SKIP (1U << 11)
#define HR_FEAT_RECVSEND_BUNDLE (1U << 14) /* 6.10 */

/* opcodes added after 6.1 */
#define HR_OP_SEND_ZC 47
#define HR_OP_BIND 56
#define HR_OP_LISTEN 57
#define HR_OP_RECV_ZC 58 /* 6.15 zero-copy receive */

/* sqe->ioprio flags for send/recv/accept */
#define HR_RECV_MULTISHOT (1U << 1)
#define HR_RECVSEND_BUNDLE (1U << 4) /* 6.10 */
#define HR_ACCEPT_MULTISHOT (1U << 0)

/* cqe->flags */
#define HR_CQE_F_BUFFER (1U << 0)
#define HR_CQE_F_MORE (1U << 1)
#define HR_CQE_F_BUF_MORE (1U << 4) /* incremental buffer partially used */
#define HR_CQE_BUFFER_SHIFT 16

#define HR_ASYNC_CANCEL_ALL (1U << 0)
#define HR_ASYNC_CANCEL_ANY (1U << 2)

/* register opcodes */
#define HR_REGISTER_EVENTFD 4
#define HR_REGISTER_PROBE 8
#define HR_REGISTER_PBUF_RING 22
#define HR_UNREGISTER_PBUF_RING 23
#define HR_REGISTER_ZCRX_IFQ 32 /* 6.15 */

/* IORING_REGISTER_PBUF_RING flags */
#define HR_PBUF_RING_INC 2 /* 6.12 incremental consumption */

struct hr_buf_reg { /* io_uring_buf_reg with the 6.12 flags field */
    uint64_t ring_addr;
    uint32_t ring_entries;
    uint16_t bgid;
    uint16_t flags;
    uint64_t resv[3];
};

struct hr_buf { /* io_uring_buf; the ring tail overlays bufs[0].resv */
    uint64_t addr;
    uint32_t len;
    uint16_t bid;
    uint16_t resv;
};

/* zero-copy receive registration (6.15) */
#define HR_MEM_REGION_TYPE_USER 1

struct hr_region_desc {
    uint64_t user_addr;
    uint64_t size;
    uint32_t flags;
    uint32_t id;
    uint64_t mmap_offset;
    uint64_t resv[4];
};

struct hr_zcrx_area_reg {
    uint64_t addr;
    uint64_t len;
    uint64_t rq_area_token;
    uint32_t flags;
    uint32_t resv1;
    uint64_t resv2[2];
};

struct hr_zcrx_offsets {
    uint32_t head;
    uint32_t tail;
    uint32_t rqes;
    uint32_t resv2;
    uint64_t resv[2];
};

struct hr_zcrx_ifq_reg {
    uint32_t if_idx;
    uint32_t if_rxq;
    uint32_t rq_entries;
    uint32_t flags;
    uint64_t area_ptr;
    uint64_t region_ptr;
    struct hr_zcrx_offsets offsets;
    uint32_t zcrx_id;
    uint32_t resv2;
    uint64_t resv[3];
};

struct hr_zcrx_rqe {
    uint64_t off;
    uint32_t len;
    uint32_t pad;
};

static inline int hr_io_uring_setup(unsigned entries, struct io_uring_params *p)
{
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static inline int hr_io_uring_enter(int fd, unsigned to_submit, unsigned min_complete,
                                    unsigned flags)
{
    return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, NULL, 0);
}

static inline int hr_io_uring_register(int fd, unsigned op, void *arg, unsigned nr)
{
    return (int)syscall(__NR_io_uring_register, fd, op, arg, nr);
}

#endif
