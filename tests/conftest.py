"""Fixtures shared by every test directory."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from simulacra import Sim


def _has_subinterpreters() -> bool:
    """Whether this Python can run the 'interpreters' backend (the executor's own check)."""
    from simulacra import BackendUnavailable
    from simulacra.executors import InterpreterExecutor

    try:
        InterpreterExecutor(1).close()  # creates no pool: it only picks one
    except BackendUnavailable:
        return False
    return True


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``@pytest.mark.without_subinterpreters`` tests where the backend works."""
    if item.get_closest_marker("without_subinterpreters") and _has_subinterpreters():
        pytest.skip("this Python has sub-interpreters: the 'interpreters' backend works here")


def pytest_configure(config: pytest.Config) -> None:
    """A test named by its node id (``file.py::test``) runs even if it is slow.

    ``-m "not slow"`` (pyproject.toml) leaves the slow tests out of a plain run;
    naming one on the command line asks for it.
    """
    if config.option.markexpr == "not slow" and any("::" in arg for arg in config.args):
        config.option.markexpr = ""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """Say what the default run left out: the slow tests (``-m "not slow"`` in pyproject.toml)."""
    if config.option.markexpr != "not slow":
        return
    left = sum(1 for item in terminalreporter.stats.get("deselected", [])
               if isinstance(item, pytest.Item) and item.get_closest_marker("slow"))
    if left:
        terminalreporter.write_line(
            f"{left} slow test{'s' if left != 1 else ''} left out: `python -m pytest -m slow` "
            "runs them (CI runs both)")


@pytest.fixture
def sim() -> Iterator[Sim]:
    """A fresh ``Sim(seed=0)``; the kernel's invariants are checked after the test."""
    # Imported here, not at the top, so that a broken kernel fails the tests
    # that use it rather than the collection of every test.
    import simulacra

    fresh = simulacra.Sim(seed=0)
    yield fresh
    fresh._check_invariants()


def _load_module(name: str, path: Path) -> ModuleType:
    """Import the file *path* under *name* once (examples are not an installed package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_module() -> Callable[[str, Path], ModuleType]:
    """``load_module(name, path)``: import an example's file by path, once per session."""
    return _load_module
