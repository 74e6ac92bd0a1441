"""The front door: ``simulacra.__all__`` is the public API, and it looks public.

Every exported class and function claims the module ``simulacra`` (the front
door calls ``simulacra._util.claim_public_module``), so reprs, tracebacks and
pickles never show a private path such as ``simulacra.core._kernel``.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import simulacra

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: A dotted path with a private part, e.g. "simulacra.core._kernel".
PRIVATE_PATH = re.compile(r"simulacra(\.\w+)*\._\w+")


def _exported() -> list[tuple[str, Any]]:
    return [(name, getattr(simulacra, name)) for name in simulacra.__all__]


def _classes_and_functions() -> list[tuple[str, Any]]:
    return [
        (name, obj) for name, obj in _exported() if isinstance(obj, type) or inspect.isfunction(obj)
    ]


def test_all_lists_only_names_that_exist() -> None:
    missing = [name for name in simulacra.__all__ if not hasattr(simulacra, name)]

    assert missing == []
    assert len(set(simulacra.__all__)) == len(simulacra.__all__), "duplicates in __all__"


def test_the_kernel_api_is_exported() -> None:
    """The names the README and the SimPy mapping promise are at the front door."""
    promised = {"Sim", "Event", "Process", "Interrupt", "Resource", "Store", "SimError"}

    assert promised <= set(simulacra.__all__)


def test_every_export_claims_the_public_module() -> None:
    """Reprs, tracebacks and pickles show `simulacra.X`, never a private path."""
    wrong = {
        name: obj.__module__
        for name, obj in _classes_and_functions()
        if obj.__module__ != "simulacra"
    }

    assert wrong == {}


def test_reprs_show_no_private_module_path() -> None:
    sim = simulacra.Sim(seed=0)
    resource = simulacra.Resource(sim, capacity=1)

    def idle(sim: simulacra.Sim) -> Any:
        yield sim.delay(1.0)

    objects: list[object] = [
        sim,
        sim.event(),
        sim.delay(1.0),
        sim.spawn(idle),
        resource,
        resource.request(),
        simulacra.Store(sim),
        simulacra.Container(sim, capacity=10.0),
        *(obj for _, obj in _classes_and_functions()),
    ]
    leaks = [repr(obj) for obj in objects if PRIVATE_PATH.search(repr(obj))]

    assert leaks == []


def test_exported_errors_pickle_by_their_public_path() -> None:
    """An error raised in a worker process comes back as the same public class."""
    error = simulacra.SimError("queue ran dry")

    data = pickle.dumps(error)
    restored = pickle.loads(data)  # noqa: S301  (our own bytes)

    assert b"simulacra.errors" not in data
    assert type(restored) is simulacra.SimError
    assert restored.args == error.args


def test_version_matches_the_pyproject_version_source() -> None:
    """pyproject reads the version from one attribute; the front door exports that one."""
    with PYPROJECT.open("rb") as file:
        config = tomllib.load(file)
    assert "version" in config["project"]["dynamic"]
    module_name, _, attribute = config["tool"]["setuptools"]["dynamic"]["version"][
        "attr"
    ].rpartition(".")

    source = getattr(importlib.import_module(module_name), attribute)

    assert simulacra.__version__ == source


@pytest.mark.parametrize(("name", "obj"), _classes_and_functions())
def test_every_public_class_and_function_has_a_docstring(name: str, obj: Any) -> None:
    assert (obj.__doc__ or "").strip(), f"simulacra.{name} has no docstring"
    if not isinstance(obj, type):
        return
    undocumented = []
    for attr, member in vars(obj).items():
        if attr.startswith("_"):
            continue
        function = member.fget if isinstance(member, property) else member
        if isinstance(function, staticmethod | classmethod):
            function = function.__func__
        if inspect.isfunction(function) and not (function.__doc__ or "").strip():
            undocumented.append(attr)

    assert undocumented == [], f"simulacra.{name} members without a docstring"
