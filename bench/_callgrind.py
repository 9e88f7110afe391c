"""Instructions per item of work under valgrind's callgrind, for the benches' ``--instructions``
modes: wall-clock on a shared machine moves with the neighbours' load, an instruction count
does not (threads are serialised, so it counts the work, not the waiting; nor cache misses).

A child run does a fixed setup and then `n` items; two runs, of `n1` and `n2` items, each in
its own interpreter under ``PYTHONHASHSEED=0``, give (count(n2) - count(n1)) / (n2 - n1): the
setup, the interpreter's start-up and the import cancel out. The child should switch the
garbage collector off (a collection costs millions of instructions, at no fixed time).
"""
from __future__ import annotations

import os
import subprocess
import sys


def count(argv: list[str], env: dict | None = None) -> int:
    """Instructions callgrind collects running ``python *argv``."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        + argv, env=dict(os.environ, PYTHONHASHSEED="0", **(env or {})), capture_output=True,
        text=True, check=True)
    line = [x for x in proc.stderr.splitlines() if "Collected" in x][0]
    return int(line.split()[-1])


def per_item(argv_for_n, n1: int, n2: int, env: dict | None = None) -> float:
    """Instructions per item: `argv_for_n(n)` is the child's command line for `n` items."""
    return (count(argv_for_n(n2), env) - count(argv_for_n(n1), env)) / (n2 - n1)
