"""``Router``, ``ServerPool`` and ``RateLimit``: several endpoints behind one model."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, ProviderError, ProviderUnavailable, UnknownEndpoint
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    Endpoint,
    OpenAICompatible,
    RateLimit,
    Router,
    ScriptedModel,
    ScriptedServer,
    ServerPool,
    check_fallbacks,
    endpoint_of,
    request_from_openai,
    request_to_openai,
)


class _Seen:
    """A real scripted model that also keeps who asked it (the pool's choice is the subject)."""

    def __init__(self, seed: int = 0) -> None:
        self.model = ScriptedModel(seed=seed)
        self.sites: list[str] = []
        self.firsts: list[str] = []
        self.lock = threading.Lock()

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        with self.lock:
            self.sites.append(str(site))
            self.firsts.append(request.messages[0].content)
        return self.model.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def _request(persona: str, text: str) -> CompletionRequest:
    return CompletionRequest.chat(text, system=persona)


@settings(max_examples=30, deadline=None)
@given(personas=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6),
       servers=st.integers(2, 4))
def test_prefix_affinity_sends_a_shared_prefix_to_one_server(
        personas: list[str], servers: int) -> None:
    seen = [_Seen() for _ in range(servers)]
    pool = ServerPool(seen, affinity="prefix")  # type: ignore[arg-type]
    for i, persona in enumerate(personas * 3):
        pool.complete(_request(persona, f"turn {i}"), site=CallSite("a", i))
    for persona in set(personas):
        holders = [k for k, s in enumerate(seen) if persona in s.firsts]
        assert len(holders) == 1, (persona, holders)


def test_round_robin_and_agent_affinity() -> None:
    seen = [_Seen(), _Seen()]
    pool = ServerPool(seen, affinity="round_robin")  # type: ignore[arg-type]
    for i in range(6):
        pool.complete(_request("p", str(i)), site=CallSite("a", i))
    assert [len(s.sites) for s in seen] == [3, 3]
    seen = [_Seen(), _Seen(), _Seen()]
    pool = ServerPool(seen, affinity="agent")  # type: ignore[arg-type]
    for agent in ("x", "y", "z", "w"):
        for n in range(3):
            pool.complete(_request(f"p{n}", "t"), site=CallSite(agent, n))
    for agent in ("x", "y", "z", "w"):
        assert sum(any(site.startswith(agent + "/") for site in s.sites) for s in seen) == 1


def test_a_pool_refuses_no_servers_and_unknown_affinity() -> None:
    with pytest.raises(ConfigError, match="at least one server"):
        ServerPool([])
    with pytest.raises(ConfigError, match="affinity must be one of"):
        ServerPool([ScriptedModel()], affinity="sticky")


def test_a_rate_limit_spaces_the_starts() -> None:
    limit = RateLimit(50)  # one start every 20 ms
    starts: list[float] = []
    lock = threading.Lock()

    def call() -> None:
        limit.wait_turn()
        with lock:
            starts.append(time.monotonic())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    starts.sort()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # sleeping never wakes early: every start is at least its slot (less clock grain)
    assert starts[-1] - starts[0] >= 7 * 0.02 - 0.002, gaps


def test_a_rate_limit_on_asyncio() -> None:
    limit = RateLimit(100)

    async def main() -> list[float]:
        async def one() -> float:
            await limit.await_turn()
            return time.monotonic()
        return sorted(await asyncio.gather(*(one() for _ in range(5))))

    starts = asyncio.run(main())
    assert starts[-1] - starts[0] >= 4 * 0.01 - 0.002


@pytest.mark.parametrize("rate", [0, -1, "fast", None])
def test_a_rate_limit_must_be_positive(rate: Any) -> None:
    with pytest.raises(ConfigError, match="rate limit must be"):
        RateLimit(rate)


class _Down:
    """A model whose provider is gone: every call raises ProviderUnavailable."""

    calls = 0

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        self.calls += 1
        raise ProviderUnavailable("connection refused")

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def test_the_fallback_chain_takes_the_calls_and_says_so() -> None:
    down_a, down_b = _Down(), _Down()
    router = Router([Endpoint("a", down_a, fallback="b"),  # type: ignore[arg-type]
                     Endpoint("b", down_b, fallback="c"),  # type: ignore[arg-type]
                     Endpoint("c", ScriptedModel(seed=1))],
                    lambda site, request: "a")
    reply = router.complete(_request("p", "hi"), site=CallSite("ada", 0))
    assert endpoint_of(reply) == ("c", "a")
    assert reply.text == ScriptedModel(seed=1).complete(_request("p", "hi"),
                                                        site=CallSite("ada", 0)).text
    assert set(router.down) == {"a", "b"}
    assert router.tripped is None
    again = asyncio.run(router.acomplete(_request("p", "hi"), site=CallSite("ada", 1)))
    assert endpoint_of(again) == ("c", "a")
    assert (down_a.calls, down_b.calls) == (1, 1)  # down: not asked again
    assert router.moved == {("a", "c"): 2}


def test_without_a_fallback_the_run_must_stop() -> None:
    router = Router([Endpoint("a", _Down())], lambda site, request: "a")  # type: ignore[arg-type]
    with pytest.raises(ProviderUnavailable, match="endpoint 'a'"):
        router.complete(_request("p", "hi"))
    assert router.tripped is not None


def test_a_route_to_nowhere_is_an_unknown_endpoint() -> None:
    router = Router([Endpoint("a", ScriptedModel())], lambda site, request: "b")
    with pytest.raises(UnknownEndpoint, match="'b', which is not declared"):
        router.complete(_request("p", "hi"), site=CallSite("ada", 0))


def test_endpoints_and_fallbacks_are_checked() -> None:
    with pytest.raises(ConfigError, match="two endpoints are named 'a'"):
        Router([Endpoint("a", ScriptedModel()), Endpoint("a", ScriptedModel())],
               lambda site, request: "a")
    with pytest.raises(ConfigError, match="cycle: b -> c -> b"):
        check_fallbacks({"a": "b", "b": "c", "c": "b"})
    with pytest.raises(ConfigError, match="fallback 'z' is not a declared"):
        check_fallbacks({"a": "z"})
    check_fallbacks({"a": "b", "b": None})


def test_the_json_object_schema_format_reaches_the_server_as_a_schema() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    request = CompletionRequest.chat("give x", response_schema_json=json.dumps(schema))
    body = request_to_openai(request, "m", "json_object")
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    assert request_from_openai(body).response_schema == schema
    with ScriptedServer(seed=0) as server:
        client = OpenAICompatible(server.base_url, "scripted", api_key_env=None,
                                  schema_format="json_object")
        try:
            reply = client.complete(request, site=CallSite("a", 0))
        finally:
            client.close()
    assert isinstance(json.loads(reply.text)["x"], int)
    with pytest.raises(ConfigError, match="schema_format must be one of"):
        OpenAICompatible("http://127.0.0.1:1/v1", "m", schema_format="xml")


class _Flaky:
    """A model whose every call fails with a plain provider error (HTTP 500)."""

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        raise ProviderError("HTTP 500")

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def test_a_call_failing_on_an_endpoint_already_down_moves_too() -> None:
    """A call in flight when another found the endpoint down fails there with a plain error:
    it moves to the fallback as well, whatever the order the calls ended in."""
    router = Router([Endpoint("a", _Flaky(), fallback="b"),  # type: ignore[arg-type]
                     Endpoint("b", ScriptedModel(seed=1))], lambda site, request: "a")
    with pytest.raises(ProviderError, match="HTTP 500"):
        router.complete(_request("p", "hi"), site=CallSite("x", 0))  # not down: its turn fails
    router.down["a"] = ProviderUnavailable("found down by another call")
    reply = router.complete(_request("p", "hi"), site=CallSite("x", 1))
    assert endpoint_of(reply) == ("b", "a")


def test_a_pool_goes_on_without_its_dead_servers_until_none_is_left() -> None:
    alive = _Seen()
    pool = ServerPool([_Down(), alive, _Down()], affinity="round_robin")  # type: ignore[list-item]
    for i in range(6):
        pool.complete(_request("p", str(i)), site=CallSite("a", i))
    assert len(alive.sites) == 6
    assert set(pool.down) == {0, 2}
    lonely = ServerPool([_Down(), _Down()], names=["u1", "u2"])  # type: ignore[list-item]
    with pytest.raises(ProviderUnavailable, match="every server of the pool is down"):
        lonely.complete(_request("p", "x"), site=CallSite("a", 0))
