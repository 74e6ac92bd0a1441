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


#: The tests named by node id on the command line (``file.py::test``), when the
#: default ``-m "not slow"`` (pyproject.toml) is in force: they run even if slow.
_NAMED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """A slow test named by its node id runs; the others a plain run leaves out still don't.

    ``-m "not slow"`` (pyproject.toml's addopts) leaves the slow tests out of a
    plain run; naming one on the command line asks for it. A ``-m`` typed on the
    command line is left as it is.
    """
    typed = any(arg == "-m" or (arg.startswith("-m") and not arg.startswith("--"))
                for arg in config.invocation_params.args)
    named = [arg for arg in config.args if "::" in arg]
    if config.option.markexpr != "not slow" or typed or not named:
        return
    root = config.rootpath
    _NAMED.clear()
    for arg in named:
        where, _, rest = arg.partition("::")
        path = Path(where).resolve()
        try:
            where = path.relative_to(root).as_posix()
        except ValueError:
            where = path.as_posix()
        _NAMED.append(f"{where}::{rest}")
    config.option.markexpr = ""  # this hook deselects the slow ones not named (below)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With tests named by node id: leave out the slow tests that none of them names."""
    if not _NAMED:
        return

    def named(item: pytest.Item) -> bool:
        return any(item.nodeid == name or item.nodeid.startswith((f"{name}[", f"{name}::"))
                   for name in _NAMED)

    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        (kept if named(item) or not item.get_closest_marker("slow") else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """Say what the default run left out: the slow tests (``-m "not slow"`` in pyproject.toml)."""
    if config.option.markexpr != "not slow" and not _NAMED:
        return
    left = sum(1 for item in terminalreporter.stats.get("deselected", [])
               if isinstance(item, pytest.Item) and item.get_closest_marker("slow"))
    if left:
        terminalreporter.write_line(
            f"{left} slow test{'s' if left != 1 else ''} left out: add -m slow to run "
            f"{'them' if left != 1 else 'it'} (CI runs both)")


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
