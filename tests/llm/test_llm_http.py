"""OpenAICompatible against a real OpenAI-compatible HTTP server on 127.0.0.1 (ScriptedServer).

Every test starts its own server inside the test and talks to it over HTTP:
retries on 429 and 5xx, Retry-After, timeouts, the concurrency limit as the
server's peak number in flight, authentication, accounting and the wire
format. Timing is only ever checked as a lower bound (Retry-After).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from simulacra.errors import ConfigError, ProviderError, ProviderTimeout, RateLimited
from simulacra.llm import (
    SITE_HEADER,
    CallSite,
    ChatMessage,
    CompletionRequest,
    OpenAICompatible,
    ScriptedModel,
    ScriptedServer,
    TokenPrices,
    ToolSpec,
    model_from_config,
    parse_retry_after,
    request_from_openai,
    request_to_openai,
    social_prompt,
)

pytestmark = pytest.mark.timeout(60)

SRC = Path(__file__).resolve().parents[2] / "src"
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "api_key_env": None}


def _client(server: ScriptedServer, **kw: object) -> OpenAICompatible:
    options: dict[str, object] = {**FAST, "model": "scripted", "timeout": 10.0, "max_retries": 3}
    return OpenAICompatible(server.base_url, **{**options, **kw})  # type: ignore[arg-type]


def _requests(count: int) -> list[tuple[CompletionRequest, CallSite]]:
    return [
        (CompletionRequest.chat(f"question number {i} about bread and chess"), CallSite(f"a{i}", 0))
        for i in range(count)
    ]


# -- the happy path and the wire format ------------------------------------------------


def test_replies_over_http_equal_the_scripted_model_in_process() -> None:
    local = ScriptedModel(seed=7)
    prompt = social_prompt(
        "alice",
        persona="curious baker",
        interests=["bread", "chess"],
        agents=["bob", "carol"],
        feed=[(12, "bob", "Anyone tried sourdough? @alice"), (15, "carol", "yes!", 12)],
        mentions=[12],
    )
    requests = [
        CompletionRequest.chat(prompt, system="be brief", temperature=0.7, seed=3, max_tokens=200),
        CompletionRequest.chat("Tell me about harbors"),
        CompletionRequest.chat(
            "plan",
            tools=[ToolSpec("search", "web search", '{"properties":{"q":{"type":"string"}}}')],
        ),
        CompletionRequest.chat(
            "give json",
            response_schema_json='{"type":"object","properties":{"n":{"type":"integer"}}}',
        ),
    ]
    with ScriptedServer(seed=7) as server, _client(server) as client:
        for n, request in enumerate(requests):
            site = CallSite("alice", n)
            remote = client.complete(request, site=site)
            expected = local.complete(request, site=site)
            assert remote.text == expected.text
            assert remote.tool_calls == expected.tool_calls
            assert remote.finish_reason == expected.finish_reason
            assert (remote.prompt_tokens, remote.completion_tokens) == (
                expected.prompt_tokens,
                expected.completion_tokens,
            )
        assert server.calls == server.served == len(requests)
        assert server.errors == 0


def test_request_body_follows_the_chat_completions_format() -> None:
    request = CompletionRequest(
        (ChatMessage("system", "sys"), ChatMessage("user", "hi", name="bob")),
        temperature=0.5,
        seed=11,
        max_tokens=64,
        tools=(ToolSpec("f", "does f", '{"type":"object"}'),),
        response_schema_json='{"type":"object"}',
    )
    with ScriptedServer() as server, _client(server, model="my-model") as client:
        completion = client.complete(request, site=CallSite("bob/x y", 4))
        (seen,) = server.requests
    body = seen["body"]
    assert body["model"] == "my-model"
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi", "name": "bob"},
    ]
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.5, 11, 64)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "does f", "parameters": {"type": "object"}},
        }
    ]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    # the call site travels percent-encoded in the header and parses back
    assert seen["site"] == "bob%2Fx%20y/4"
    assert CallSite.parse(seen["site"]) == CallSite("bob/x y", 4)
    assert seen["authorized"] is False
    # and the server rebuilt the same request (only the model name was swapped)
    rebuilt = request_from_openai(body)
    assert (
        rebuilt.key()
        == CompletionRequest(
            request.messages,
            model="my-model",
            temperature=0.5,
            seed=11,
            max_tokens=64,
            tools=request.tools,
            response_schema_json=request.response_schema_json,
        ).key()
    )
    metadata = completion.metadata
    assert metadata["id"].startswith("chatcmpl-")
    assert metadata["system_fingerprint"] == "simulacra-scripted"
    assert metadata["usage"]["total_tokens"] == completion.total_tokens
    assert SITE_HEADER == "X-Simulacra-Site"


def test_tool_messages_map_to_tool_call_id_and_back() -> None:
    request = CompletionRequest(
        (ChatMessage("user", "go"), ChatMessage("tool", '{"ok":true}', name="call_1")),
        tools=(ToolSpec("search"),),
    )
    body = request_to_openai(request)
    assert body["messages"][1] == {
        "role": "tool",
        "content": '{"ok":true}',
        "tool_call_id": "call_1",
    }
    assert request_from_openai(body) == request


def test_tool_calls_are_parsed() -> None:
    tool = ToolSpec(
        "lookup",
        "find a word",
        json.dumps({"type": "object", "properties": {"word": {"type": "string"}}}),
    )
    with ScriptedServer() as server, _client(server) as client:
        completion = client.complete(CompletionRequest.chat("define sourdough", tools=[tool]))
    assert completion.finish_reason == "tool_calls"
    assert completion.text == ""
    (call,) = completion.tool_calls
    assert call.name == "lookup"
    assert set(call.arguments) == {"word"}


# -- retries -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_transient_errors_are_retried_until_success(status: int) -> None:
    request = CompletionRequest.chat("hello")
    with ScriptedServer(seed=1) as server, _client(server, max_retries=3) as client:
        server.fail_next(2, status)
        completion = client.complete(request)
        assert server.calls == 3
        assert [r["status"] for r in server.requests] == [status, status, 200]
        usage = client.usage
    assert completion.text == ScriptedModel(seed=1).complete(request).text
    assert (usage.calls, usage.retries, usage.attempts, usage.failures) == (1, 2, 3, 0)


def test_rate_limited_after_every_attempt() -> None:
    with ScriptedServer() as server, _client(server, max_retries=2) as client:
        server.fail_next(10, 429)
        with pytest.raises(RateLimited) as info:
            client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 3
        assert client.usage.failures == 1
    error = info.value
    assert (error.status, error.attempts, error.url) == (429, 3, client.url)
    assert client.url in str(error)
    assert "429" in str(error)
    assert "3 attempts" in str(error)


def test_server_errors_after_every_attempt() -> None:
    with ScriptedServer() as server, _client(server, max_retries=1) as client:
        server.fail_next(5, 503, body="overloaded")
        with pytest.raises(ProviderError) as info:
            client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 2
    assert not isinstance(info.value, RateLimited)
    assert info.value.status == 503
    assert "overloaded" in str(info.value)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_client_errors_are_not_retried(status: int) -> None:
    with ScriptedServer() as server, _client(server, max_retries=5) as client:
        server.fail_next(1, status)
        with pytest.raises(ProviderError) as info:
            client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 1
    assert info.value.status == status
    assert info.value.attempts == 1
    assert "not retried" in str(info.value)


def test_retry_after_seconds_is_honoured() -> None:
    with ScriptedServer() as server, _client(server, backoff_base=0.001) as client:
        server.fail_next(1, 429, retry_after=1)
        start = time.monotonic()
        client.complete(CompletionRequest.chat("hello"))
        waited = time.monotonic() - start
        assert server.calls == 2
    assert waited >= 1.0


def test_retry_after_http_date_is_honoured() -> None:
    with ScriptedServer() as server, _client(server, backoff_base=0.001) as client:
        when = email.utils.formatdate(time.time() + 2, usegmt=True)
        server.fail_next(1, 503, retry_after=when)
        start = time.monotonic()
        client.complete(CompletionRequest.chat("hello"))
        waited = time.monotonic() - start
        assert server.calls == 2
    # the date has whole seconds: at least one of the two seconds is left to wait
    assert waited >= 1.0


def test_retry_after_beyond_the_cap_fails_at_once() -> None:
    with ScriptedServer() as server, _client(server, retry_after_max=5.0) as client:
        server.fail_next(1, 429, retry_after=3600)
        with pytest.raises(RateLimited, match="retry_after_max"):
            client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 1


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_dropped_connections_are_retried() -> None:
    with ScriptedServer() as server, _client(server, max_retries=2) as client:
        server.disconnect_next(1)
        client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 2
        assert [r["status"] for r in server.requests] == [None, 200]


def test_connection_refused_names_the_url_and_attempts() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAICompatible(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, timeout=5, **FAST)  # type: ignore[arg-type]
    with client, pytest.raises(ProviderError) as info:
        client.complete(CompletionRequest.chat("hello"))
    assert info.value.attempts == 2
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "ConnectError" in str(info.value)


# -- timeouts --------------------------------------------------------------------------


def test_timeout_on_every_attempt_raises_provider_timeout() -> None:
    with ScriptedServer() as server, _client(server, timeout=0.2, max_retries=1) as client:
        server.delay_next(2, 3.0)
        with pytest.raises(ProviderTimeout) as info:
            client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 2
    assert isinstance(info.value, TimeoutError)
    assert info.value.attempts == 2
    assert "timed out" in str(info.value)


def test_a_timed_out_attempt_is_retried() -> None:
    with ScriptedServer() as server, _client(server, timeout=0.2, max_retries=2) as client:
        server.delay_next(1, 3.0)
        client.complete(CompletionRequest.chat("hello"))
        assert server.calls == 2
        assert client.usage.retries == 1


def test_async_timeout_raises_provider_timeout() -> None:
    async def main(client: OpenAICompatible) -> None:
        async with client:
            await client.acomplete(CompletionRequest.chat("hello"))

    with ScriptedServer() as server:
        server.delay_next(1, 3.0)
        with pytest.raises(ProviderTimeout):
            asyncio.run(main(_client(server, timeout=0.2, max_retries=0)))
        assert server.calls == 1


# -- the concurrency limit ---------------------------------------------------------------


def test_concurrency_limit_bounds_the_peak_in_flight_threads() -> None:
    pairs = _requests(20)
    with ScriptedServer(latency=0.05) as server, _client(server, concurrency=4) as client:
        server.rendezvous(4)  # the first four are held until all four are in flight together
        with ThreadPoolExecutor(max_workers=20) as pool:
            results = list(pool.map(lambda p: client.complete(p[0], site=p[1]), pairs))
        assert server.peak_in_flight == 4
        assert client.usage.peak_in_flight == 4
        assert server.calls == 20
        assert server.errors == 0
    local = ScriptedModel()
    assert [r.text for r in results] == [local.complete(q, site=s).text for q, s in pairs]


def test_concurrency_limit_bounds_the_peak_in_flight_asyncio() -> None:
    pairs = _requests(20)

    async def main(client: OpenAICompatible) -> list[str]:
        async with client:
            done = await asyncio.gather(*(client.acomplete(q, site=s) for q, s in pairs))
        return [c.text for c in done]

    with ScriptedServer(latency=0.05) as server:
        server.rendezvous(4)
        texts = asyncio.run(main(_client(server, concurrency=4)))
        assert server.peak_in_flight == 4
        assert server.calls == 20
    local = ScriptedModel()
    assert texts == [local.complete(q, site=s).text for q, s in pairs]


@pytest.mark.determinism
def test_random_reply_order_gives_the_same_results_as_sequential() -> None:
    """Seeded random latency makes replies arrive out of order; results stay in identity order."""
    pairs = _requests(24)
    with (
        ScriptedServer(latency=(0.0, 0.02), latency_seed=5) as server,
        _client(server, concurrency=8) as client,
    ):
        sequential = [client.complete(q, site=s) for q, s in pairs]
        with ThreadPoolExecutor(max_workers=12) as pool:
            threaded = list(pool.map(lambda p: client.complete(p[0], site=p[1]), pairs))

        async def main() -> list[object]:
            return list(await asyncio.gather(*(client.acomplete(q, site=s) for q, s in pairs)))

        async def run_and_close() -> list[object]:
            try:
                return await main()
            finally:
                await client.aclose()

        concurrent = asyncio.run(run_and_close())
    assert threaded == sequential
    assert concurrent == sequential


def test_async_clients_are_per_event_loop_and_closed_with_it() -> None:
    """Two asyncio.run calls on one provider; the loop's client closes with the loop."""
    with ScriptedServer() as server:
        client = _client(server)
        first = asyncio.run(client.acomplete(CompletionRequest.chat("one")))
        second = asyncio.run(client.acomplete(CompletionRequest.chat("one")))
        client.close()
        assert server.calls == 2
    assert first == second


# -- keys, accounting, validation -----------------------------------------------------


def test_bearer_token_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMULACRA_TEST_LLM_KEY", "sk-right")
    with (
        ScriptedServer(api_key="sk-right") as server,
        _client(server, api_key_env="SIMULACRA_TEST_LLM_KEY") as client,
    ):
        client.complete(CompletionRequest.chat("hello"))
        assert server.requests[0]["authorized"] is True
        monkeypatch.setenv("SIMULACRA_TEST_LLM_KEY", "sk-wrong")  # read at every call
        with pytest.raises(ProviderError) as info:
            client.complete(CompletionRequest.chat("hello"))
        assert info.value.status == 401
        assert server.calls == 2  # 401 is not retried


def test_missing_key_is_allowed_only_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIMULACRA_TEST_UNSET_KEY", raising=False)
    remote = OpenAICompatible(
        "https://api.example.invalid/v1", "m", api_key_env="SIMULACRA_TEST_UNSET_KEY"
    )
    with remote, pytest.raises(ConfigError, match="SIMULACRA_TEST_UNSET_KEY"):
        remote.complete(CompletionRequest.chat("hello"))
    with ScriptedServer() as server:
        with OpenAICompatible(
            server.base_url.replace("127.0.0.1", "localhost"),
            "scripted",
            api_key_env="SIMULACRA_TEST_UNSET_KEY",
        ) as local:
            local.complete(CompletionRequest.chat("hello"))
        assert server.requests[0]["authorized"] is False


def test_token_and_cost_accounting() -> None:
    pairs = _requests(5)
    with (
        ScriptedServer() as server,
        _client(server, prices={"prompt": 2.0, "completion": 8.0}) as client,
    ):
        completions = [client.complete(q, site=s) for q, s in pairs]
        usage = client.usage
    prompt = sum(c.prompt_tokens for c in completions)
    generated = sum(c.completion_tokens for c in completions)
    assert prompt > 0
    assert generated > 0
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt, generated)
    assert usage.total_tokens == prompt + generated
    assert usage.cost == pytest.approx((prompt * 2.0 + generated * 8.0) / 1e6)
    assert TokenPrices(1.0, 3.0).cost(1_000_000, 1_000_000) == 4.0


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"concurrency": 0}, "concurrency"),
        ({"backoff_base": -1.0}, "backoff_base"),
        ({"prices": {"input": 1.0}}, "prices"),
        ({"prices": {"prompt": -1.0}}, "TokenPrices.prompt"),
        ({"api_key_env": ""}, "api_key_env"),
    ],
)
def test_bad_settings_name_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        OpenAICompatible("http://127.0.0.1:1/v1", "m", **kw)  # type: ignore[arg-type]


def test_bad_base_url() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAICompatible("ftp://x/v1", "m")


def test_model_from_config_builds_each_provider(tmp_path: Path) -> None:
    assert isinstance(model_from_config({"provider": "scripted", "seed": 3}), ScriptedModel)
    with ScriptedServer() as server:
        client = model_from_config(
            {
                "provider": "openai_compatible",
                "base_url": server.base_url,
                "model": "scripted",
                "api_key_env": None,
                "concurrency": 2,
            }
        )
        assert isinstance(client, OpenAICompatible)
        client.complete(CompletionRequest.chat("hi"))
        client.close()
    with pytest.raises(ConfigError, match="unknown option"):
        model_from_config(
            {"provider": "openai_compatible", "base_url": "http://x", "model": "m", "colour": "red"}
        )
    with pytest.raises(ConfigError, match="provider must be one of"):
        model_from_config({"provider": "magic"})


def test_importing_the_llm_layer_does_not_import_httpx() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    code = "import sys, simulacra.llm; print('httpx' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_server_validates_its_arguments() -> None:
    with pytest.raises(ConfigError, match="latency"):
        ScriptedServer(latency=-1.0)
    with pytest.raises(ConfigError, match="latency"):
        ScriptedServer(latency=(2.0, 1.0))
    with ScriptedServer() as server:
        with pytest.raises(ConfigError, match="status"):
            server.fail_next(1, 200)
        with pytest.raises(ConfigError, match="count"):
            server.fail_next(-1)


def test_server_answers_bad_requests_with_400() -> None:
    import httpx

    with ScriptedServer() as server, httpx.Client() as http:
        bad = http.post(f"{server.base_url}/chat/completions", content=b"not json")
        empty = http.post(f"{server.base_url}/chat/completions", json={"messages": []})
        site = http.post(
            f"{server.base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={SITE_HEADER: "no-number"},
        )
        models = http.get(f"{server.base_url}/models")
        missing = http.get(f"{server.base_url}/nothing")
    assert (bad.status_code, empty.status_code, site.status_code) == (400, 400, 400)
    assert "at least one message" in empty.json()["error"]["message"]
    assert models.json()["data"][0]["id"] == "scripted"
    assert missing.status_code == 404


def test_a_provider_dropped_without_close_leaves_no_socket_open() -> None:
    """A ResourceWarning here would be an error (pyproject: filterwarnings = error)."""
    import gc
    import warnings

    with ScriptedServer() as server:
        client = _client(server)
        client.complete(CompletionRequest.chat("hello"))
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            del client
            gc.collect()


def test_aclose_loop_keeps_the_provider_usable() -> None:
    async def twice(client: OpenAICompatible) -> None:
        await client.acomplete(CompletionRequest.chat("one"))
        await client.aclose_loop()
        await client.acomplete(CompletionRequest.chat("two"))  # a fresh client for this loop
        await client.aclose_loop()

    with ScriptedServer() as server, _client(server) as client:
        asyncio.run(twice(client))
        client.complete(CompletionRequest.chat("three"))
        assert server.calls == 3


def test_a_concurrency_above_one_clients_share_is_reached_across_clients() -> None:
    """Slots over several clients (8 connections each): all 20 open at once, no more."""
    pairs = _requests(40)
    with ScriptedServer(latency=0.05) as server, _client(server, concurrency=20) as client:
        server.rendezvous(20)  # held until twenty are in flight together
        with ThreadPoolExecutor(max_workers=40) as pool:
            results = list(pool.map(lambda p: client.complete(p[0], site=p[1]), pairs))
        assert server.peak_in_flight == 20
        assert client.usage.peak_in_flight == 20
        assert server.calls == 40
    local = ScriptedModel()
    assert [r.text for r in results] == [local.complete(q, site=s).text for q, s in pairs]


def test_a_closed_client_refuses_calls_in_one_line() -> None:
    with ScriptedServer() as server:
        client = _client(server, concurrency=12)
        request, site = _requests(1)[0]
        client.complete(request, site=site)
        client.close()
        with pytest.raises(ConfigError, match="is closed"):
            client.complete(request, site=site)


def test_close_while_calls_are_in_flight_or_waiting_gives_them_one_line_each() -> None:
    pairs = _requests(6)
    with ScriptedServer(latency=0.3) as server:
        client = _client(server, concurrency=2, max_retries=0)
        with ThreadPoolExecutor(max_workers=6) as pool:
            futures = [pool.submit(client.complete, q, site=s) for q, s in pairs]
            deadline = time.monotonic() + 10
            while server.calls < 2 and time.monotonic() < deadline:
                time.sleep(0.01)  # two in flight, four waiting for a slot
            client.close()
            errors = [f.exception(30) for f in futures]
    refused = [e for e in errors if e is not None]
    assert refused  # the calls cut by close(), and those that waited for a slot
    for error in refused:
        assert isinstance(error, ConfigError), repr(error)
        assert "is closed: close() was called while this call was in flight" in str(error)
