"""bench.tenant_cost reads a Callgrind dump by stage of an event (``--callgrind --cachesim``)."""

from __future__ import annotations

from bench.tenant_cost import stages_from_annotation

# The shape of ``callgrind_annotate --inclusive=yes --show=Ir,DLmr`` lines; a
# root listed twice (caller and callee views) counts once, from its first line.
TIMERS = "CPyDef_engine____poll_forever_DeliveryEngine_gen_____mypyc_generator_helper__"
ROWS = [
    ("1,000,000 (100.0%)", "9,000 (100.0%)", "PROGRAM TOTALS"),
    (
        "  300,000 (30.00%)",
        "3,000 (33.33%)",
        "c:CPyDef_session___HttpSession___data_received [a.so]",
    ),
    ("  200,000 (20.00%)", "2,000 (22.22%)", "c:CPyDef_engine___DeliveryEngine____pump [a.so]"),
    ("  100,000 (10.00%)", "    .         ", "c:CPyDef_connection___Conn___data_received [a.so]"),
    ("   50,000 ( 5.00%)", "1,500 (16.67%)", f"c:{TIMERS} [a.so]"),
    ("   10,000 ( 1.00%)", "  100 ( 1.11%)", "c:CPyDef_engine___DeliveryEngine____pump [a.so]"),
]
ANNOTATION = "\n".join("  ".join(row) for row in ROWS) + "\n"


def test_stages_are_read_per_event_and_the_timers_kept_apart() -> None:
    stages = stages_from_annotation(ANNOTATION, 100)
    assert stages["ingest request"] == [3.0, 30.0]
    assert stages["attempt start"] == [2.0, 20.0]  # its first line, not the second
    assert stages["attempt response"] == [1.0, 0.0]
    assert stages["timers"] == [0.5, 15.0]
    assert stages["event path (stages summed)"] == [6.0, 50.0], "the timers are not summed"


def test_an_interpreted_build_has_no_stages() -> None:
    assert stages_from_annotation("1,000 (100.0%) 10 (100.0%)  PROGRAM TOTALS\n", 10) == {}
