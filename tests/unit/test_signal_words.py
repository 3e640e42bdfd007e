"""Issue 37, the re-probes: `diagnose` on /var/log read Debian's package name `libsigsegv2` (dpkg.log) as a
segmentation fault. A signal's name counts as a whole word only; the real ways it is printed still count."""

from __future__ import annotations

import pytest

from tests.unit.test_classify import node

DPKG = ["2026-12-03 14:00:51 install libsigsegv2:amd64 <none> 2.14-1",  # this machine's /var/log/dpkg.log
        "2026-12-03 14:00:51 status half-installed libsigsegv2:amd64 2.14-1",
        "Unpacking libsigbus-dev (1.0) ..."]
REAL = [("Fatal Python error: Segmentation fault", "segfault"),
        ("torch.distributed.elastic.multiprocessing.api: failed (exitcode: -11) local_rank: 3 (pid: 2211) of binary: "
         "/usr/bin/python3", "segfault"),
        ("*** SIGSEGV (@0x0) received by PID 1337 (TID 0x7f1c) from PID 0; stack trace: ***", "segfault"),
        ("Signal: SIGSEGV (Segmentation fault)", "segfault"),
        ("exits with return code = -7", "bus_error"),
        ("*** SIGBUS (@0x7f00) received by PID 42 (TID 0x7f01) from PID 0; stack trace: ***", "bus_error")]


def names(line: str) -> set[str]:
    return {m.signature for m in node("node1", [line]).matches}


@pytest.mark.parametrize("line", DPKG)
def test_a_package_named_after_a_signal_is_no_crash(line: str) -> None:
    assert not names(line) & {"segfault", "bus_error"}


@pytest.mark.parametrize(("line", "name"), REAL)
def test_the_real_ways_a_signal_is_printed_still_count(line: str, name: str) -> None:
    assert name in names(line)
