"""Make io_uring_setup fail in THIS process with a chosen errno (seccomp).

Used in a child process only: once installed a seccomp filter cannot be
removed. Built with ctypes and a hand-written 6-instruction classic BPF
program rather than a helper inside the extension, so that it also works
where the extension is not built (the router's ``auto`` fallback must be
testable there too) and production code carries no test-only syscall
filter. The program:

    load arch; if arch != AUDIT_ARCH_X86_64 -> allow
    load syscall nr; if nr == __NR_io_uring_setup -> return ERRNO(errno)
    allow

Usage in a child: ``deny_io_uring_setup(errno.EPERM)`` before anything else.
"""

from __future__ import annotations

import ctypes
import platform

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
NR_IO_URING_SETUP = 425  # same number on every architecture (unified table)

# classic BPF opcodes
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
OFF_NR = 0  # struct seccomp_data: int nr
OFF_ARCH = 4  # __u32 arch


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def deny_io_uring_setup(errno_value: int) -> None:
    """Install the filter; raises OSError if the kernel refuses it."""
    if platform.machine() != "x86_64":
        raise OSError("seccomp helper only knows x86_64")
    program = [
        SockFilter(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        SockFilter(BPF_JEQ_K, 0, 3, AUDIT_ARCH_X86_64),  # other arch -> allow
        SockFilter(BPF_LD_W_ABS, 0, 0, OFF_NR),
        SockFilter(BPF_JEQ_K, 0, 1, NR_IO_URING_SETUP),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | (errno_value & 0xFFFF)),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    filters = (SockFilter * len(program))(*program)
    prog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
