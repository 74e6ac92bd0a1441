"""One reference loader, one set of words: the same bad reference reads the same everywhere.

A reference (``"path/to/file.py:fn"`` or ``"module:fn"``) is given to simulacra
in several places: a unit of work (``resolve_callable``), a study's model
(``Experiment``), an agent class or action (``resolve_ref``), a society's
world factory (``sim.world.factory``) and the command line's TARGET
(``simulacra run``). Each goes through ``simulacra.executors.RefLoader``; these
tests give each entry point the same bad references and check the words of
its error: the field that held the reference, then the same phrase.
"""

from __future__ import annotations

import contextlib
import io
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulacra.agents import resolve_ref
from simulacra.cli import main
from simulacra.errors import ConfigError
from simulacra.executors import resolve_callable
from simulacra.parallel import Experiment
from simulacra.societies import load_factory

MODULE = "_one_loader_model"
BROKEN = "_one_loader_broken"


@dataclass(frozen=True)
class Caller:
    """A public entry point that takes a reference, and the field its errors name."""

    name: str
    field: str  #: "" for the command line, whose errors start with "error: "
    files: bool  #: whether it takes path/to/file.py references
    strings_only: bool  #: whether its own grammar checks the reference first (the CLI's TARGET)
    call: Callable[[object], object]

    def message(self, ref: object) -> str:
        """The one-line error the entry point gives for *ref*."""
        with pytest.raises(ConfigError) as info:
            self.call(ref)
        return str(info.value)

    def words(self, phrase: str) -> str:
        """*phrase* as this caller says it: after its field."""
        return f"{self.field}: {phrase}" if self.field else phrase


def _cli(ref: object) -> None:
    """``simulacra run REF``: a usage error (exit 2) is re-raised with its message."""
    assert isinstance(ref, str)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status = main(["run", ref])
    err = stderr.getvalue()
    assert status == 2, err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    raise ConfigError(err.removeprefix("error: ").rstrip("\n"))


CALLERS = [
    Caller("resolve_callable", "fn", files=True, strings_only=False,
           call=lambda ref: resolve_callable(ref, "fn")),  # type: ignore[arg-type]
    Caller("Experiment", "model_fn", files=True, strings_only=False,
           call=lambda ref: Experiment(ref, [{}], master_seed=1)),  # type: ignore[arg-type]
    Caller("resolve_ref", "cls", files=False, strings_only=False,
           call=lambda ref: resolve_ref(ref, "cls")),  # type: ignore[arg-type]
    Caller("sim.world.factory", "sim.world.factory", files=True, strings_only=False,
           call=load_factory),  # type: ignore[arg-type]
    Caller("simulacra run", "", files=True, strings_only=True, call=_cli),
]


def callers(*, files: bool = False, callable_only: bool = False, grammar: bool = False,
            any_object: bool = False) -> pytest.MarkDecorator:
    """Parametrize over the entry points that take what the test gives.

    Args:
        files: Only those that take file references.
        callable_only: Only those that want a callable (not ``resolve_ref``).
        grammar: Only those whose reference grammar is the loader's (not the
            command line's TARGET, where a bare WHERE means WHERE:run).
        any_object: Leave out ``Experiment``, which takes a function or its
            reference: 42 is "not callable" there.
    """
    chosen = [c for c in CALLERS
              if (c.files or not files) and (c.name != "resolve_ref" or not callable_only)
              and (not c.strings_only or not grammar)
              and (c.name != "Experiment" or not any_object)]
    return pytest.mark.parametrize("caller", chosen, ids=[c.name for c in chosen])


@pytest.fixture(autouse=True)
def _models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A good module and a broken one, importable by name from *tmp_path*."""
    (tmp_path / f"{MODULE}.py").write_text("VALUE = 3\n\ndef run(seed=0):\n    return {}\n",
                                           encoding="utf-8")
    (tmp_path / f"{BROKEN}.py").write_text("import _one_loader_missing_dependency\n",
                                           encoding="utf-8")
    (tmp_path / "broken_file.py").write_text("import _one_loader_missing_dependency\n",
                                             encoding="utf-8")
    (tmp_path / "empty").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in (MODULE, BROKEN):
        sys.modules.pop(name, None)


@callers(files=True)
def test_a_missing_file(caller: Caller, tmp_path: Path) -> None:
    where = str(tmp_path / "missing.py")
    assert caller.message(f"{where}:run") == caller.words(f"file not found: {where!r}")


@callers(files=True)
def test_a_directory(caller: Caller, tmp_path: Path) -> None:
    where = str(tmp_path / "empty")
    assert caller.message(f"{where}:run") == caller.words(
        f"file not found: directory {where!r} has no model.py")


@callers()
def test_a_missing_module(caller: Caller) -> None:
    ref = "_one_loader_no_such_module:run"
    assert caller.message(ref) == caller.words(
        f"no module named '_one_loader_no_such_module' (from {ref!r})")


@callers()
def test_a_module_whose_own_import_is_broken_keeps_its_traceback(caller: Caller) -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        caller.call(f"{BROKEN}:run")

    assert info.value.name == "_one_loader_missing_dependency"
    frames = [frame.filename for frame in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1].endswith(f"{BROKEN}.py")


@callers(files=True)
def test_a_file_whose_own_import_is_broken_keeps_its_traceback(caller: Caller,
                                                                tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        caller.call(f"{tmp_path / 'broken_file.py'}:run")

    frames = [frame.filename for frame in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1].endswith("broken_file.py")


@callers()
def test_a_missing_attribute(caller: Caller) -> None:
    message = caller.message(f"{MODULE}:nope")

    assert f"{MODULE!r} has no attribute 'nope'" in message
    if caller.field:
        assert message == caller.words(f"{MODULE!r} has no attribute 'nope'")
    else:  # the command names the function it looked for first: TARGET may name none
        assert message == f"no such function: 'nope' in {MODULE!r} ({MODULE!r} has no " \
                          "attribute 'nope')"


@callers(callable_only=True)
def test_not_callable(caller: Caller) -> None:
    assert caller.message(f"{MODULE}:VALUE") == caller.words(
        f"{MODULE}:VALUE is not callable: its type is int")


def test_an_agent_reference_may_name_any_object() -> None:
    """Agent classes and their actions are looked up as they are; the caller checks them."""
    assert resolve_ref(f"{MODULE}:VALUE", "cls") == 3


@callers(grammar=True)
@pytest.mark.parametrize("ref", ["run", f"{MODULE}:1bad", ":run"])
def test_a_malformed_reference(caller: Caller, ref: str) -> None:
    shapes = ("'module:qualname' or 'path/to/file.py:qualname'" if caller.files
              else "'module:qualname'")
    assert caller.message(ref) == f"{caller.field} must look like {shapes}, got {ref!r}"


@callers(grammar=True, any_object=True)
def test_not_a_string(caller: Caller) -> None:
    shapes = ("'module:qualname' or 'path/to/file.py:qualname'" if caller.files
              else "'module:qualname'")
    assert caller.message(42) == f"{caller.field} must be a str {shapes}, got int 42"


def test_a_file_reference_is_refused_where_only_modules_are_taken(tmp_path: Path) -> None:
    ref = f"{tmp_path / 'model.py'}:run"
    assert CALLERS[2].message(ref) == f"cls must look like 'module:qualname', got {ref!r}"


def test_a_file_that_does_not_parse_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken_model.py"
    broken.write_text("def build(**kw)\n    return 1\n")
    with pytest.raises(ConfigError, match=r"broken_model\.py, line 1: SyntaxError: expected ':'"):
        load_factory(f"{broken}:build")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", f"{broken}:build", "--no-progress"])
    assert code == 2
    assert err.getvalue().count("\n") == 1, err.getvalue()
    assert "Traceback" not in err.getvalue()
