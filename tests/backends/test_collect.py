"""DataCollector: model- and agent-level reporters after every step of a Model run.

The same seed gives the same tables on every backend and worker count (the
reporters read the snapshots the backends already return); a small ring model
is checked by hand; bad reporters are refused before the run, a missing
attribute names the agent, a failing reporter keeps its exception and says where.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    Agent,
    ConfigError,
    Context,
    DataCollector,
    ExecutionBackend,
    LocalBackend,
    Model,
    ProcessPoolBackend,
    ThreadPoolBackend,
)
from simulacra._util import install_hint

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # workers inherit sys.path and import the models by this name
    sys.path.insert(0, str(HERE))

import _engine_models as models  # noqa: E402

STEPS = 5


def total_cash(agents: Mapping[Any, Mapping[str, Any]]) -> float:
    return sum(state.get("cash", 0.0) for state in agents.values())


def collector() -> DataCollector:
    """Reporters of every shape: a function of all states, attribute names, functions."""
    return DataCollector(
        model_reporters={
            "total_cash": total_cash,
            "audits": lambda agents: [len(s.get("totals", ())) for s in agents.values()],
            "first": lambda agents: next(iter(agents)),
        },
        agent_reporters={
            "cash": lambda state: state.get("cash"),
            "ticks": lambda state: state.get("ticks"),
            "seen": lambda state: len(state.get("seen", ())),
        },
    )


BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("local", LocalBackend),
    ("threaded-2", lambda: ThreadPoolBackend(2)),
    ("processes-1", lambda: ProcessPoolBackend(1)),
    ("processes-2", lambda: ProcessPoolBackend(2)),
    ("processes-3-hash", lambda: ProcessPoolBackend(3, partition="hash")),
]


@pytest.fixture(scope="module")
def reference() -> DataCollector:
    collected = collector()
    models.conformance_model().run(models.CONFORMANCE_SEQUENCE, steps=STEPS, collect=collected)
    return collected


@pytest.mark.determinism
@pytest.mark.parametrize("digests", [True, False], ids=["digests", "no-digests"])
@pytest.mark.parametrize("make", [factory for _, factory in BACKENDS],
                         ids=[name for name, _ in BACKENDS])
def test_same_seed_same_tables_on_every_backend(make: Callable[[], ExecutionBackend],
                                                digests: bool,
                                                reference: DataCollector) -> None:
    backend = make()
    try:
        collected = collector()
        models.conformance_model(backend).run(models.CONFORMANCE_SEQUENCE, steps=STEPS,
                                              digests=digests, collect=collected)
    finally:
        backend.close()
    assert collected.model_rows() == reference.model_rows()
    assert collected.agent_rows() == reference.agent_rows()
    pytest.importorskip("polars")
    assert collected.model_table().equals(reference.model_table())
    assert collected.agent_table().equals(reference.agent_table())


@pytest.mark.determinism
@pytest.mark.parametrize("backend", ["local", "threaded", "processes"])
def test_backends_by_name_give_the_reference_tables(backend: str,
                                                    reference: DataCollector) -> None:
    collected = collector()
    models.conformance_model(backend).run(models.CONFORMANCE_SEQUENCE, steps=STEPS,
                                          collect=collected)
    assert collected.agent_rows() == reference.agent_rows()
    assert collected.model_rows() == reference.model_rows()


def test_the_reference_tables_are_not_trivial(reference: DataCollector) -> None:
    """Every step changes the cash; agents come in id order; each step is one row."""
    rows = reference.model_rows()
    assert [row["step"] for row in rows] == list(range(STEPS))
    assert len({row["total_cash"] for row in rows}) == STEPS
    assert rows[-1]["audits"][-2:] == [STEPS, STEPS]  # the two auditors audited every step
    assert all(row["first"] == 0 for row in rows)
    agents = reference.agent_rows()
    assert len(agents) == STEPS * 25
    assert [row["agent"] for row in agents[:25]] == list(range(25))
    assert agents[24]["cash"] is None  # an auditor has no cash
    assert reference.steps == STEPS


def test_the_last_row_is_the_final_state() -> None:
    model = models.conformance_model()
    collected = DataCollector(agent_reporters={"cash": lambda s: s.get("cash")})
    result = model.run(models.CONFORMANCE_SEQUENCE, steps=3, collect=collected)
    last = {row["agent"]: row["cash"] for row in collected.agent_rows() if row["step"] == 2}
    assert last == {agent_id: state.get("cash") for agent_id, (_, state) in result.agents.items()}


class Counter(Agent):
    """Adds its id to a total each step, and passes 1 to its right neighbour."""

    def __init__(self, id: int, *, size: int) -> None:
        super().__init__(id)
        self.size = size
        self.total = 0
        self.received = 0

    def act(self, ctx: Context) -> None:
        self.received += sum(ctx.payloads())
        self.total += self.id
        ctx.send((self.id + 1) % self.size, "one", 1)


def test_a_ring_by_hand() -> None:
    """Three counters (ids 0, 1, 2). After step k each total is id * (k + 1), and each
    has received k ones (a message sent in step k arrives in step k + 1)."""
    model = Model(seed=1)
    model.add_many(Counter, [2, 0, 1], size=3)
    collected = DataCollector(
        model_reporters={"sum": lambda agents: sum(s["total"] for s in agents.values())},
        agent_reporters={"total": "total", "received": "received"},
    )
    model.run(Counter.act, steps=3, collect=collected)
    assert collected.model_rows() == [{"step": 0, "sum": 3}, {"step": 1, "sum": 6},
                                      {"step": 2, "sum": 9}]
    assert collected.agent_rows() == [
        {"step": k, "agent": i, "total": i * (k + 1), "received": k}
        for k in range(3) for i in range(3)
    ]
    pl = pytest.importorskip("polars")
    table = collected.agent_table()
    assert table.columns == ["step", "agent", "total", "received"]
    assert table.filter(pl.col("step") == 2)["total"].to_list() == [0, 3, 6]
    assert collected.model_table().rows() == [(0, 3), (1, 6), (2, 9)]


def test_a_missing_attribute_names_the_agent_and_what_it_has() -> None:
    model = Model(seed=1)
    model.add_many(Counter, [0, 1], size=2)
    collected = DataCollector(agent_reporters={"wealth": "wealth"})
    with pytest.raises(ConfigError, match=r"agent reporter 'wealth': agent 0 \(.*Counter\) has "
                                          r"no attribute 'wealth' after step 0; it has \["):
        model.run(Counter.act, steps=2, collect=collected)


def test_a_failing_reporter_keeps_its_exception_and_says_where() -> None:
    model = Model(seed=1)
    model.add_many(Counter, [0, 1], size=2)

    def broken(state: Mapping[str, Any]) -> float:
        return 1 / (state["total"] - 1)

    collected = DataCollector(agent_reporters={"inverse": broken})
    with pytest.raises(ZeroDivisionError) as caught:
        model.run(Counter.act, steps=2, collect=collected)
    assert caught.value.__notes__ == [
        "in the DataCollector's agent reporter 'inverse' on agent 1, after step 0"]


def test_reporters_get_read_only_states() -> None:
    model = Model(seed=1)
    model.add_many(Counter, [0], size=1)

    def meddle(agents: Mapping[Any, Any]) -> None:
        agents[0]["total"] = 99

    with pytest.raises(TypeError, match="does not support item assignment"):
        model.run(Counter.act, steps=1, collect=DataCollector(model_reporters={"x": meddle}))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "give model_reporters, agent_reporters or both"),
    ({"model_reporters": [total_cash]}, r"model_reporters=\.\.\.\): expected a mapping"),
    ({"model_reporters": {"step": total_cash}}, "'step' is a column of every row"),
    ({"agent_reporters": {"agent": "cash"}}, "'agent' is a column of every row"),
    ({"model_reporters": {"x": "cash"}}, r"model_reporters=\{'x': \.\.\.\}\): expected a "
                                         "callable, got 'cash'"),
    ({"agent_reporters": {"x": 3}}, "expected an attribute name or a callable, got 3"),
    ({"agent_reporters": {"": "cash"}}, "a reporter's name must be a non-empty str"),
])
def test_bad_reporters_are_refused_when_made(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DataCollector(**kwargs)


def test_a_collector_holds_one_run() -> None:
    model = Model(seed=1)
    model.add_many(Counter, [0, 1], size=2)
    collected = DataCollector(agent_reporters={"total": "total"})
    model.run(Counter.act, steps=2, collect=collected)
    with pytest.raises(ConfigError, match="holds 2 steps of another run; call clear"):
        model.run(Counter.act, steps=2, collect=collected)
    collected.clear()
    model.run(Counter.act, steps=1, collect=collected)
    assert collected.steps == 1
    with pytest.raises(ConfigError, match="collect must be a DataCollector or None, got dict"):
        model.run(Counter.act, steps=1, collect={})  # type: ignore[arg-type]


def test_tables_without_polars_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    collected = DataCollector(agent_reporters={"total": "total"})
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(ConfigError, match=r"DataCollector.agent_table\(\) needs polars, which is "
                                          r"not installed: " + re.escape(install_hint("parallel"))):
        collected.agent_table()
    assert collected.agent_rows() == []  # the plain rows need nothing


def test_empty_tables_have_their_columns() -> None:
    pytest.importorskip("polars")
    collected = DataCollector(model_reporters={"n": len})
    assert collected.model_table().columns == ["step", "n"]
    model = Model(seed=1)
    model.add_many(Counter, [0, 1], size=2)
    model.run(Counter.act, steps=0, collect=collected)
    assert collected.model_table().height == 0


def test_the_collector_of_docs_agents_runs_as_written(tmp_path: Path) -> None:
    """docs/agents.md's first two examples, saved as one script: the SIR model and its collector."""
    import re
    import subprocess

    text = (HERE.parents[1] / "docs" / "agents.md").read_text()
    first, second = re.findall(r"```python\n(.*?)```", text, re.S)[:2]
    script = tmp_path / "sir_collect.py"
    script.write_text(f"{first}\n{second}\nprint(collector.model_rows()[-1])\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'step': 9, 'infected': 3}"
