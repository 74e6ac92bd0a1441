"""DataCollector: model- and agent-level reporters after every step of a Model run (Mesa's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias, final

from simulacra.agents import AgentId
from simulacra.errors import ConfigError
from simulacra.resources import import_polars

from ._base import AgentSnapshot

__all__ = ["AgentReporter", "DataCollector", "ModelReporter"]

#: What a model reporter is called with: every agent's state by id, in id order (read-only).
AgentStatesView: TypeAlias = Mapping[AgentId, Mapping[str, Any]]
#: A model-level reporter: a function of every agent's state.
ModelReporter: TypeAlias = Callable[[AgentStatesView], Any]
#: An agent-level reporter: an attribute name, or a function of one agent's state.
AgentReporter: TypeAlias = str | Callable[[Mapping[str, Any]], Any]

#: Columns the tables always have, so no reporter may take their names.
_MODEL_COLUMNS: Final = ("step",)
_AGENT_COLUMNS: Final = ("step", "agent")


def _checked(reporters: object, what: str, taken: tuple[str, ...],
             strings: bool) -> dict[str, Any]:
    if reporters is None:
        return {}
    if not isinstance(reporters, Mapping):
        raise ConfigError(
            f"DataCollector({what}=...): expected a mapping of names to reporters, got "
            f"{type(reporters).__name__} {reporters!r}"
        )
    out: dict[str, Any] = {}
    for name, reporter in reporters.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"DataCollector({what}=...): a reporter's name must be a non-empty str, got "
                f"{name!r}"
            )
        if name in taken:
            raise ConfigError(
                f"DataCollector({what}=...): {name!r} is a column of every row "
                f"({', '.join(taken)}); give the reporter another name"
            )
        ok = callable(reporter) or (strings and isinstance(reporter, str) and reporter)
        if not ok:
            expected = "an attribute name or a callable" if strings else "a callable"
            raise ConfigError(
                f"DataCollector({what}={{{name!r}: ...}}): expected {expected}, got "
                f"{reporter!r}"
            )
        out[name] = reporter
    return out


@final
class DataCollector:
    """Reporters evaluated after every step of a :class:`Model` run, into tables.

    In the spirit of Mesa's ``DataCollector``: *model reporters* give one value
    per step, *agent reporters* one value per agent per step. They read the
    agents' states from the snapshot the backend returns after each step (the
    one the state digest is taken from), in agent id order, so the tables are
    the same on every backend and worker count. Pass the collector to
    :meth:`Model.run`::

        collector = DataCollector(
            model_reporters={"total_cash": lambda agents: sum(s["cash"] for s in agents.values())},
            agent_reporters={"cash": "cash", "rich": lambda state: state["cash"] > 100},
        )
        model.run(sequence, steps=20, collect=collector)
        collector.model_table()   # polars: step, total_cash
        collector.agent_table()   # polars: step, agent, cash, rich

    Args:
        model_reporters: Column name -> a function of every agent's state
            (``{id: {attribute: value}}``, read-only, in id order).
        agent_reporters: Column name -> the name of an agent attribute, or a
            function of one agent's state (``{attribute: value}``, read-only).
            Every agent must have a named attribute; for a population of several
            classes use a function (``lambda state: state.get("cash")``).

    Steps are numbered from 0, as ``ctx.step`` is: row ``step == k`` is the state
    after step *k*. Reporters must not change what they are given; what they
    return is kept as it is (the states are the snapshot's own copies).

    Raises:
        ConfigError: No reporter at all, a reporter that is not a callable (or
            an attribute name), or a name that is taken (``step``, ``agent``).
    """

    __slots__ = ("_agent_reporters", "_agent_rows", "_model_reporters", "_model_rows", "_steps")

    def __init__(self, model_reporters: Mapping[str, ModelReporter] | None = None,
                 agent_reporters: Mapping[str, AgentReporter] | None = None) -> None:
        self._model_reporters: dict[str, ModelReporter] = _checked(
            model_reporters, "model_reporters", _MODEL_COLUMNS, strings=False)
        self._agent_reporters: dict[str, AgentReporter] = _checked(
            agent_reporters, "agent_reporters", _AGENT_COLUMNS, strings=True)
        if not self._model_reporters and not self._agent_reporters:
            raise ConfigError(
                "DataCollector(): give model_reporters, agent_reporters or both; with none "
                "there is nothing to collect"
            )
        self._model_rows: list[dict[str, Any]] = []
        self._agent_rows: list[dict[str, Any]] = []
        self._steps = 0

    def __repr__(self) -> str:
        return (f"<DataCollector: {len(self._model_reporters)} model and "
                f"{len(self._agent_reporters)} agent reporters, {self._steps} steps collected>")

    @property
    def steps(self) -> int:
        """How many steps have been collected."""
        return self._steps

    def clear(self) -> None:
        """Forget what was collected, to collect another run."""
        self._model_rows.clear()
        self._agent_rows.clear()
        self._steps = 0

    def _begin(self) -> None:
        """Called by Model.run before the first step."""
        if self._steps:
            raise ConfigError(
                f"Model.run(collect=...): this DataCollector holds {self._steps} steps of "
                "another run; call clear() first or give each run its own collector"
            )

    def _collect(self, step: int, snapshot: AgentSnapshot) -> None:
        """Evaluate every reporter on the states after *step* (Model.run calls it)."""
        ids = sorted(snapshot)  # one model, one id type: they sort
        states = {agent_id: MappingProxyType(snapshot[agent_id][1]) for agent_id in ids}
        if self._model_reporters:
            view = MappingProxyType(states)
            row: dict[str, Any] = {"step": step}
            for name, reporter in self._model_reporters.items():
                row[name] = _call(reporter, view, f"model reporter {name!r}", step)
            self._model_rows.append(row)
        if self._agent_reporters:
            reporters = tuple(self._agent_reporters.items())
            rows = self._agent_rows
            for agent_id, state in states.items():
                arow: dict[str, Any] = {"step": step, "agent": agent_id}
                for name, agent_reporter in reporters:
                    if isinstance(agent_reporter, str):
                        try:
                            arow[name] = state[agent_reporter]
                        except KeyError:
                            raise _missing(name, agent_reporter, agent_id, snapshot,
                                           step) from None
                    else:
                        arow[name] = _call(agent_reporter, state,
                                           f"agent reporter {name!r} on agent {agent_id!r}",
                                           step)
                rows.append(arow)
        self._steps += 1

    def model_rows(self) -> list[dict[str, Any]]:
        """The model reporters' values: one dict per step, ``{"step": k, name: value...}``."""
        return [dict(row) for row in self._model_rows]

    def agent_rows(self) -> list[dict[str, Any]]:
        """The agent reporters' values: one dict per step and agent (step, then id order)."""
        return [dict(row) for row in self._agent_rows]

    def model_table(self) -> Any:
        """The model reporters' values as a polars DataFrame: ``step`` and one column each.

        Raises:
            ConfigError: polars is not installed (``python -m pip install '.[parallel]'``).
        """
        return self._table(self._model_rows, _MODEL_COLUMNS, self._model_reporters,
                           "DataCollector.model_table()")

    def agent_table(self) -> Any:
        """The agent reporters' values as a polars DataFrame: ``step``, ``agent``, one each.

        Raises:
            ConfigError: polars is not installed (``python -m pip install '.[parallel]'``).
        """
        return self._table(self._agent_rows, _AGENT_COLUMNS, self._agent_reporters,
                           "DataCollector.agent_table()")

    @staticmethod
    def _table(rows: list[dict[str, Any]], fixed: tuple[str, ...],
               reporters: Mapping[str, Any], what: str) -> Any:
        pl = import_polars(what)
        columns = [*fixed, *reporters]
        if not rows:
            return pl.DataFrame({name: [] for name in columns})
        return pl.DataFrame({name: [row[name] for row in rows] for name in columns},
                            strict=False)


def _call(reporter: Callable[[Any], Any], argument: Any, what: str, step: int) -> Any:
    try:
        return reporter(argument)
    except Exception as exc:
        exc.add_note(f"in the DataCollector's {what}, after step {step}")
        raise


def _missing(name: str, attribute: str, agent_id: AgentId, snapshot: AgentSnapshot,
             step: int) -> ConfigError:
    cls, state = snapshot[agent_id]
    return ConfigError(
        f"DataCollector agent reporter {name!r}: agent {agent_id!r} ({cls}) has no attribute "
        f"{attribute!r} after step {step}; it has {sorted(state)}. For agents of several "
        f"classes, use a function: lambda state: state.get({attribute!r})"
    )
