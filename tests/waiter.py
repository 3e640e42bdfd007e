"""A live Python process that waits in a function named like a collective: something real for py-spy and
/proc to read in the dump tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

CODE = ("import time\ndef wait_in_collective():\n    print('ready', flush=True)\n    while True:\n"
        "        time.sleep(0.01)\nwait_in_collective()\n")


@contextmanager
def waiting_process() -> Iterator[subprocess.Popen[str]]:
    """The process, once it is inside wait_in_collective; killed and reaped on exit."""
    p = subprocess.Popen([sys.executable, "-c", CODE], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield p
    finally:
        p.kill()
        p.wait()
