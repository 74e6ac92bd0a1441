"""Unit functions for the executor tests: module-level, so worker processes can import them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def square(x: int) -> int:
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"three is not allowed (got {x})")
    return x


def count_calls(unit: tuple[str, int]) -> int:
    """Append one line per call to a file, then fail for unit 1 (a bug: must not be retried)."""
    path, x = unit
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(f"{x}\n")
    if x == 1:
        raise RuntimeError("bug")
    return x


def die_once(unit: tuple[str, int]) -> int:
    """Kill the worker the first time unit 2 runs (a marker file remembers)."""
    directory, x = unit
    marker = Path(directory) / f"died-{x}"
    if x == 2 and not marker.exists():
        marker.write_text("", encoding="utf-8")
        os._exit(1)
    return x


def die_always(x: int) -> int:
    if x == 2:
        os._exit(1)
    return x


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"a={a} b={b}")


def raise_unpicklable(x: int) -> int:
    raise Unpicklable(x, x + 1)


def identity(x: Any) -> Any:
    return x


def pid(_: object) -> int:
    return os.getpid()


class Factory:
    @classmethod
    def make(cls, x: int) -> int:
        return x


def seeded_draws(unit: tuple[str, int]) -> tuple[bool, list[float]]:
    """Draws from a SeedTree-derived stream, and whether they ran in a sub-interpreter."""
    import importlib

    from simulacra.rng import SeedTree

    seed, replication = unit
    rng = SeedTree(seed).replication(replication).stream("draws")
    try:
        interpreters = importlib.import_module("_interpreters")
        in_sub = interpreters.get_current() != interpreters.get_main()
    except ImportError:
        in_sub = False
    return in_sub, [rng.random() for _ in range(3)]


def spin(x: int) -> int:
    """CPU-bound work for timing: a few hundred ms of pure-Python arithmetic."""
    total = x
    for i in range(3_000_000):
        total = (total * 31 + i) % 1_000_003
    return total


class WorkerStopped(BaseException):
    """Not an Exception: what a worker being told to stop raises in a task."""


def stop_worker_once(unit: tuple[str, int]) -> int:
    """Raise a BaseException (not a bug in the unit: the worker stopping) the first time."""
    directory, x = unit
    marker = Path(directory) / f"stopped-{x}"
    if x == 1 and not marker.exists():
        marker.write_text("", encoding="utf-8")
        raise WorkerStopped("the worker is shutting down")
    return x


def lock_result(unit: tuple[str, int]) -> Any:
    """Return something that cannot be pickled back, and count the calls."""
    import threading

    path, x = unit
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(f"{x}\n")
    return threading.Lock() if x == 1 else x
