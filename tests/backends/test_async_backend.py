"""AsyncBackend, and ``async def`` actions on every backend: same seed, same result.

The async conformance model awaits seeded random delays in its actions, so on
AsyncBackend its coroutines finish in a random order; every backend (local,
threads, processes, async with any semaphore limit, and the backends of the
other ``_conf_*.py`` files) must still give the LocalBackend reference's
per-step digests bit for bit.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from simulacra import (
    AgentActionError,
    AsyncBackend,
    ConfigError,
    ExecutionBackend,
    LocalBackend,
    Model,
    ProcessPoolBackend,
    RunResult,
    ThreadPoolBackend,
    UnknownRecipient,
    get_backend,
    load_settings,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # workers inherit sys.path and import the models by this name
    sys.path.insert(0, str(HERE))

import _async_models as amodels  # noqa: E402
import _engine_models as models  # noqa: E402

STEPS = 4

BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("local", LocalBackend),
    ("threaded-1", lambda: ThreadPoolBackend(1)),
    ("threaded-2", lambda: ThreadPoolBackend(2)),
    ("threaded-4", lambda: ThreadPoolBackend(4)),
    ("processes-1", lambda: ProcessPoolBackend(1)),
    ("processes-2", lambda: ProcessPoolBackend(2)),
    ("processes-4", lambda: ProcessPoolBackend(4, start_method="forkserver")),
]
BACKENDS += importlib.import_module("_conf_async").BACKENDS
#: The backends of the other ``_conf_*.py`` files (Pregel, Dask, MCP...): slower to start,
#: so they run the main test only.
OTHERS: list[tuple[str, Callable[[], ExecutionBackend]]] = []
for _extra in sorted(HERE.glob("_conf_*.py")):
    if _extra.stem != "_conf_async":
        OTHERS += importlib.import_module(_extra.stem).BACKENDS

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=[factory for _, factory in BACKENDS + OTHERS],
                ids=[name for name, _ in BACKENDS + OTHERS])
def any_backend(request: pytest.FixtureRequest) -> Iterator[ExecutionBackend]:
    instance = request.param()
    yield instance
    instance.close()


@pytest.fixture(scope="module", params=[factory for _, factory in BACKENDS],
                ids=[name for name, _ in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Iterator[ExecutionBackend]:
    instance = request.param()
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def reference() -> RunResult:
    return amodels.async_model().run(amodels.ASYNC_SEQUENCE, steps=STEPS)


def _assert_same(result: RunResult, reference: RunResult) -> None:
    assert result.message_counts == reference.message_counts
    assert result.message_digests == reference.message_digests
    assert result.state_digests == reference.state_digests
    assert dict(result.agents) == dict(reference.agents)
    assert result.digest == reference.digest


def test_the_async_reference_exercises_every_feature(reference: RunResult) -> None:
    """Guards against a vacuous pass: async actions ran, sent, drew and mutated."""
    assert len(set(reference.state_digests)) == STEPS
    assert all(count > 0 for count in reference.message_counts)
    assert reference.state(0)["seen"]
    assert len(reference.state(23)["totals"]) == STEPS
    assert any(reference.state(n)["ticks"] > 0 for n in range(23))
    assert reference.state(5)["cash"] != int(reference.state(5)["cash"])
    sync = models.conformance_model().run(models.CONFORMANCE_SEQUENCE, steps=STEPS)
    assert sync.digest != reference.digest  # the delays draw from ctx.rng: another model


@pytest.mark.determinism
def test_async_actions_give_the_same_result_on_every_backend(any_backend: ExecutionBackend,
                                                             reference: RunResult) -> None:
    result = amodels.async_model(any_backend).run(amodels.ASYNC_SEQUENCE, steps=STEPS)

    _assert_same(result, reference)


@pytest.mark.determinism
def test_async_actions_with_str_ids(backend: ExecutionBackend) -> None:
    def model(backend: ExecutionBackend | None) -> Model:
        return amodels.async_model(backend, string_ids=True, traders=11, auditors=2,
                                   seed="str")

    reference = model(None).run(amodels.ASYNC_SEQUENCE, steps=2)
    _assert_same(model(backend).run(amodels.ASYNC_SEQUENCE, steps=2), reference)


@pytest.mark.parametrize("limit", [1, 3, 128])
def test_awaits_overlap_up_to_the_limit_and_finish_out_of_order(limit: int,
                                                                reference: RunResult) -> None:
    amodels.reset_probe()
    with AsyncBackend(limit) as backend:
        result = amodels.async_model(backend).run(amodels.ASYNC_SEQUENCE, steps=STEPS)

    assert amodels.PROBE["max"] == min(limit, 25)  # 25 agents: all at once under 128
    done = amodels.PROBE["done"]
    if limit > 1:  # completion order is the delays' order, not the id order...
        assert done[:23] != sorted(done[:23])
    _assert_same(result, reference)  # ...and the result does not show it


def test_local_backend_runs_each_coroutine_to_its_end_in_id_order() -> None:
    amodels.reset_probe()
    amodels.async_model().run(amodels.ASYNC_SEQUENCE, steps=1)

    assert amodels.PROBE["max"] == 1
    assert amodels.PROBE["done"] == list(range(23))


@pytest.mark.parametrize("backend_name", ["local", "async", "threaded"])
def test_a_model_runs_from_inside_a_running_event_loop(backend_name: str,
                                                       reference: RunResult) -> None:
    async def main() -> RunResult:
        await asyncio.sleep(0)
        return amodels.async_model(backend_name).run(amodels.ASYNC_SEQUENCE, steps=STEPS)

    _assert_same(asyncio.run(main()), reference)


@pytest.mark.parametrize("make", [LocalBackend, lambda: AsyncBackend(2), AsyncBackend,
                                  lambda: ProcessPoolBackend(2)],
                         ids=["local", "async-2", "async-128", "processes-2"])
def test_the_error_is_the_lowest_failing_agents(make: Callable[[], ExecutionBackend]) -> None:
    """Agents 3..9 fail, the highest ids first in time; agent 3's error is raised."""
    backend = make()
    try:
        model = Model(seed=1, backend=backend)
        model.add_many(amodels.Failing, range(10))
        with pytest.raises(AgentActionError) as info:
            model.run(amodels.Failing.act, steps=3)
    finally:
        backend.close()
    assert (info.value.agent, info.value.step, info.value.phase) == (3, 1, "Failing.act")
    assert isinstance(info.value.__cause__, ValueError)
    assert "agent 3 fails on purpose" in str(info.value)


@pytest.mark.parametrize("make", [LocalBackend, AsyncBackend], ids=["local", "async"])
def test_an_unknown_recipient_names_the_lowest_sender(make: Callable[[], ExecutionBackend],
                                                       ) -> None:
    model = Model(seed=1, backend=make())
    model.add_many(amodels.Lost, range(10))
    with pytest.raises(UnknownRecipient) as info:
        model.run(amodels.Lost.act, steps=3)
    assert (info.value.sender, info.value.recipient, info.value.step) == (4, 99, 1)


def test_a_failing_plain_action_stops_later_agents_as_the_reference_does() -> None:
    results = {}
    for backend in (LocalBackend(), AsyncBackend()):
        backend.start(_specs(amodels.SyncFailing, 8), Model(seed=3).seed, None)
        phase = _phase(amodels.SyncFailing.act)
        with pytest.raises(AgentActionError) as info:
            backend.execute_action(phase, 0, 0)
        assert info.value.agent == 4
        results[backend.name] = {i: s["ran"] for i, (_, s) in backend.snapshot().items()}
        backend.close()
    assert results["async"] == results["local"] == {i: i <= 4 for i in range(8)}


def test_the_async_backend_is_reusable_and_closes_its_thread(reference: RunResult) -> None:
    backend = AsyncBackend(8)
    model = amodels.async_model(backend)
    model.run(amodels.ASYNC_SEQUENCE, steps=1)
    _assert_same(model.run(amodels.ASYNC_SEQUENCE, steps=STEPS), reference)
    backend.close()
    backend.close()  # idempotent
    _assert_same(model.run(amodels.ASYNC_SEQUENCE, steps=STEPS), reference)  # restarts
    backend.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8", None])
def test_semaphore_limit_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigError, match="semaphore_limit must be an int >= 1"):
        AsyncBackend(bad)  # type: ignore[arg-type]


def test_settings_choose_the_async_backend(tmp_path: Path, reference: RunResult) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"orchestration": {"mode": "async",
                                                  "async_semaphore_limit": 3}}))
    backend = load_settings(path).backend()
    assert isinstance(backend, AsyncBackend)
    assert backend.semaphore_limit == 3
    assert repr(get_backend("async")) == "AsyncBackend(semaphore_limit=128)"

    result = amodels.async_model(settings=path).run(amodels.ASYNC_SEQUENCE, steps=STEPS)

    assert result.backend == "async"
    _assert_same(result, reference)


# --------------------------------------------------------------------------- helpers


def _specs(cls: type, count: int) -> list:  # type: ignore[type-arg]
    model = Model(seed=3)
    model.add_many(cls, range(count))
    return list(model.specs)


def _phase(action: Callable[..., object]):  # type: ignore[no-untyped-def]
    from simulacra import Phase

    return Phase(action)


@pytest.mark.parametrize("make", [LocalBackend, AsyncBackend, lambda: ProcessPoolBackend(2)],
                         ids=["local", "async", "processes-2"])
def test_a_fan_out_to_repeated_recipients_equals_one_send_each(
        make: Callable[[], ExecutionBackend]) -> None:
    """A broadcast is stored as one entry; its messages are those of separate sends."""
    def run(fan_out: bool, backend: ExecutionBackend | None) -> RunResult:
        model = Model(seed=5, backend=backend)
        model.add_many(amodels.Repeater, range(3), fan_out=fan_out)
        return model.run(amodels.Repeater.act, steps=3)

    backend = make()
    try:
        fanned, sent = run(True, backend), run(False, None)
    finally:
        backend.close()
    assert fanned.message_digests == sent.message_digests
    assert fanned.message_counts == sent.message_counts == (18, 18, 18)
    for agent in range(3):  # inboxes hold the same Messages in the same order
        assert fanned.state(agent)["got"] == sent.state(agent)["got"]
        assert fanned.state(agent)["payloads"] == sent.state(agent)["payloads"]
    assert [m[2] for m in fanned.state(1)["got"][1]] == [0, 1, 4, 0, 1, 4, 0, 1, 4]
