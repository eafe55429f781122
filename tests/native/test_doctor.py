"""The doctor report on this machine, and its rendering."""

from __future__ import annotations

import errno

from hookrouter.ingress.doctor import DoctorReport, explain_setup_errno, probe, render


def test_probe_reports_kernel_and_engine_choices() -> None:
    report = probe()
    assert report.kernel
    assert report.engines["asyncio"] == "asyncio"
    assert report.engines["auto"] in ("epoll",) or report.engines["auto"].startswith("asyncio")
    assert not report.engines["auto"].startswith("io_uring")  # never chosen unless named
    if report.setup_errno == 0 and report.native_available:
        assert report.features["multishot_recv"] is True
        assert report.zcrx_interface == "lo"
        assert report.zcrx_errno not in (None, 0)  # loopback cannot do zero-copy receive
    text = render(report)
    assert "engine setting -> engine used:" in text
    assert f"kernel: {report.kernel}" in text


def test_render_of_a_refused_machine() -> None:
    report = DoctorReport(
        kernel="6.1.0",
        io_uring_disabled=2,
        io_uring_group=-1,
        native_available=True,
        native_error=None,
        setup_errno=errno.EPERM,
        probe_error=None,
        engines={"io_uring": "unavailable: x", "auto": "epoll"},
    )
    text = render(report)
    assert "kernel.io_uring_disabled=2 disables it" in text
    assert "io_uring features" not in text  # nothing claimed that was not probed


def test_explanations_name_the_cause() -> None:
    assert "seccomp" in explain_setup_errno(errno.EPERM, 0)
    assert "io_uring_group" in explain_setup_errno(errno.EPERM, 1)
    assert "CONFIG_IO_URING" in explain_setup_errno(errno.ENOSYS, None)
