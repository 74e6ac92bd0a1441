"""EmulatorBackend and the worker protocol: distributed logic, in-process, no network.

The same-seed-same-result checks for 1, 2 and 4 emulated workers are in the
conformance suite (``tests/backends/_conf_mcp.py``); here: the protocol's
encoding, the worker's dispatch and its errors, and failures through the
emulator.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulacra import (
    AgentActionError,
    BackendError,
    ConfigError,
    KernelBug,
    LocalBackend,
    Model,
    RemoteError,
    SeedTree,
    UnknownRecipient,
    get_backend,
)
from simulacra.distributed import EmulatorBackend
from simulacra.distributed._mcp_worker import build_server
from simulacra.distributed._protocol import (
    PROTOCOL_VERSION,
    TOOLS,
    WorkerState,
    decode,
    encode,
    unpack_error,
)

BACKEND_TESTS = Path(__file__).resolve().parents[1] / "backends"
if str(BACKEND_TESTS) not in sys.path:
    sys.path.insert(0, str(BACKEND_TESTS))

import _engine_models as models  # noqa: E402

pytestmark = pytest.mark.timeout(60)

_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.frozensets(st.integers(), max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=12,
)


def _types(value: Any) -> Any:
    """The value with every leaf replaced by its type: equal only if the types match too."""
    if isinstance(value, list | tuple):
        return (type(value), [_types(item) for item in value])
    if isinstance(value, frozenset):
        return (frozenset, sorted(value))
    if isinstance(value, dict):
        return (dict, [(key, _types(item)) for key, item in value.items()])
    return (type(value), value)


@given(_PLAIN)
def test_encoding_round_trips_exactly(value: Any) -> None:
    """Types survive: a tuple stays a tuple, 1 stays an int, True stays a bool."""
    back = decode(encode(value))

    assert back == value
    assert _types(back) == _types(value)


def test_the_encoding_is_one_ascii_string() -> None:
    text = encode({"a": (1, 2.5, {3})})

    assert isinstance(text, str)
    assert text.isascii()


def _reply(state: WorkerState, tool: str, **arguments: Any) -> Any:
    return decode(state.call(tool, {key: encode(value) for key, value in arguments.items()}))


def test_a_worker_runs_its_partition_only() -> None:
    model = models.conformance_model()
    specs = [spec for spec in model.specs if spec.id in (0, 5, 23)]
    state = WorkerState()

    status, _ = _reply(state, "start", data=(PROTOCOL_VERSION, specs, model.seed, None,
                                             list(model.agent_ids)))
    assert status == "ok"
    vip = models.CONFORMANCE_SEQUENCE[2]
    assert _reply(state, "agents_for", data=vip) == ("ok", [0, 5])
    status, snapshot = _reply(state, "snapshot")
    assert list(snapshot) == [0, 5, 23]


def test_a_worker_reports_misuse_as_data_not_as_an_exception() -> None:
    state = WorkerState()

    status, packed = _reply(state, "snapshot")
    assert status == "error"
    assert isinstance(unpack_error(packed), BackendError)
    assert "call start first" in str(unpack_error(packed))

    status, packed = _reply(state, "format_disk")
    assert status == "error"
    assert isinstance(unpack_error(packed), KernelBug)

    status, packed = _reply(state, "start", data=(PROTOCOL_VERSION + 1, [], SeedTree(0), None, []))
    assert status == "error"
    assert "worker protocol" in str(unpack_error(packed))


def test_shutdown_drops_the_agents() -> None:
    state = WorkerState()
    _reply(state, "start", data=(PROTOCOL_VERSION, [], SeedTree(0), None, []))

    assert _reply(state, "shutdown") == ("ok", None)
    assert state.stopping
    assert _reply(state, "snapshot")[0] == "error"


def test_the_worker_server_lists_the_six_tools() -> None:
    """Through the SDK's in-memory transport, as the emulator talks to it."""
    from mcp import Client

    async def tools() -> Any:
        async with Client(build_server(WorkerState()), mode="legacy", cache=None) as client:
            return (await client.list_tools()).tools

    listed = asyncio.run(tools())

    assert tuple(tool.name for tool in listed) == TOOLS
    execute = next(tool for tool in listed if tool.name == "execute_action")
    assert execute.input_schema["required"] == ["data"]
    assert set(execute.input_schema["properties"]) == {"data", "deliver"}


@pytest.mark.determinism
@pytest.mark.parametrize("workers", [1, 2, 4, 7])
def test_same_seed_same_result_for_any_worker_count(workers: int) -> None:
    reference = models.conformance_model(LocalBackend()).run(models.CONFORMANCE_SEQUENCE, steps=3)

    with EmulatorBackend({"workers": workers}) as backend:
        result = models.conformance_model(backend).run(models.CONFORMANCE_SEQUENCE, steps=3)

    assert result.backend == "emulator"
    assert result.state_digests == reference.state_digests
    assert result.message_digests == reference.message_digests
    assert result.digest == reference.digest


def test_more_workers_than_agents() -> None:
    model = Model(seed=3)
    model.add_many(models.Ring, range(3), size=3)
    reference = model.run(models.Ring.act, steps=4)

    with EmulatorBackend({"workers": 5}) as backend:
        model = Model(seed=3, backend=backend)
        model.add_many(models.Ring, range(3), size=3)
        assert model.run(models.Ring.act, steps=4).digest == reference.digest


def test_settings_choose_the_emulator() -> None:
    model = Model(seed=11, settings={"orchestration": {"mode": "emulator",
                                                       "mcp_config": {"workers": 3}}})
    model.add_many(models.Ring, range(8), size=8)
    reference = Model(seed=11)
    reference.add_many(models.Ring, range(8), size=8)

    result = model.run(models.Ring.act, steps=3)

    assert result.backend == "emulator"
    assert result.digest == reference.run(models.Ring.act, steps=3).digest


def test_an_action_error_names_agent_phase_and_step() -> None:
    with EmulatorBackend({"workers": 3}) as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Faulty, range(10), bad_id=6, bad_step=2)
        with pytest.raises(AgentActionError) as info:
            model.run(models.Faulty.act, steps=5)

    assert (info.value.agent, info.value.phase, info.value.step) == (6, "Faulty.act", 2)
    assert isinstance(info.value.__cause__, ValueError)


def test_an_exception_that_cannot_travel_arrives_as_remote_error() -> None:
    with EmulatorBackend({"workers": 2}) as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Unpicklable, range(3))
        with pytest.raises(AgentActionError) as info:
            model.run(models.Unpicklable.act, steps=1)

    assert info.value.agent == 0
    assert isinstance(info.value.__cause__, RemoteError)
    assert "cannot be pickled" in str(info.value.__cause__)


def test_an_unknown_recipient_and_a_bad_constructor() -> None:
    with EmulatorBackend() as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Misaddressed, range(6))
        with pytest.raises(UnknownRecipient) as info:
            model.run(models.Misaddressed.act, steps=3)
        assert (info.value.sender, info.value.recipient) == (4, 99)

        model = Model(seed=0, backend=backend)
        model.add(models.Faulty, 1, bad_id=0, bad_step=0)
        model.add(models.BadInit, 2)
        with pytest.raises(AgentActionError) as init_info:
            model.run(models.Faulty.act, steps=1)
        assert (init_info.value.agent, init_info.value.phase) == (2, "__init__")


def test_a_backend_that_is_not_started_says_so() -> None:
    backend = EmulatorBackend()

    with pytest.raises(ConfigError, match="EmulatorBackend is not started"):
        backend.snapshot()


def test_the_emulator_takes_no_urls() -> None:
    with pytest.raises(ConfigError, match="urls cannot be used with the emulator"):
        get_backend("emulator", mcp_config={"urls": ["http://127.0.0.1:1/mcp"]})


def test_close_is_idempotent_and_the_backend_restarts() -> None:
    backend = EmulatorBackend({"workers": 2})
    model = Model(seed=5, backend=backend)
    model.add_many(models.Ring, range(4), size=4)
    first = model.run(models.Ring.act, steps=2)
    backend.close()
    backend.close()

    assert model.run(models.Ring.act, steps=2).digest == first.digest
    backend.close()
