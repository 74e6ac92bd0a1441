"""The LLM layer: the scripted model's cost per call, and the HTTP client against its peers.

Every contestant runs inside the same round, and the rounds alternate their
order, so the drift of a shared machine cancels out in the ratios.

(a) ``scripted``: ``ScriptedModel.complete`` on social prompts (50 agents, a
    feed of 20 posts), microseconds per call, next to the two steps no scripted
    model can skip: building the request and hashing it (``CompletionRequest.chat``
    and ``.key()``). Reported as the model's cost / that floor.
(b) ``client``: sequential calls to a ``ScriptedServer`` on 127.0.0.1 (no
    latency). ``OpenAICompatible.complete`` (with retries, accounting, the
    concurrency limit) against a bare ``httpx.Client.post`` of the same body
    with JSON decoding. The ratio is our overhead per call.
(c) ``overlap``: N calls whose replies take 200 ms, at concurrency 64, on
    threads and on asyncio. The ideal wall time is N * 0.2 / 64. The ratio is
    wall / ideal.

Usage::

    python bench/llm_client.py            # all three
    python bench/llm_client.py --quick    # smaller sizes, a smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import httpx

from simulacra.llm import (
    CallSite,
    CompletionRequest,
    OpenAICompatible,
    ScriptedModel,
    ScriptedServer,
    request_to_openai,
    social_prompt,
)


def _prompts(count: int) -> list[str]:
    agents = [f"user{i}" for i in range(50)]
    feed = [(i, agents[i % 50], f"post {i} about gardening and chess @user3") for i in range(20)]
    return [
        social_prompt(
            agents[j % 50],
            persona="a curious baker",
            interests=["bread", "chess"],
            agents=agents,
            feed=feed,
            mentions=[3] if j % 3 == 0 else [],
        )
        for j in range(count)
    ]


def bench_scripted(calls: int, rounds: int) -> None:
    prompts = _prompts(50)
    model = ScriptedModel(0)
    ratios, model_us, floor_us = [], [], []
    for r in range(rounds):

        def floor() -> float:
            start = time.perf_counter()
            for i in range(calls):
                CompletionRequest.chat(prompts[i % 50], max_tokens=120).key()
            return time.perf_counter() - start

        def scripted() -> float:
            start = time.perf_counter()
            for i in range(calls):
                request = CompletionRequest.chat(prompts[i % 50], max_tokens=120)
                model.complete(request, site=CallSite(f"user{i % 50}", i))
            return time.perf_counter() - start

        first, second = (floor, scripted) if r % 2 == 0 else (scripted, floor)
        a, b = first(), second()
        t_floor, t_model = (a, b) if first is floor else (b, a)
        ratios.append(t_model / t_floor)
        model_us.append(t_model / calls * 1e6)
        floor_us.append(t_floor / calls * 1e6)
    print(f"(a) scripted: {calls} calls x {rounds} rounds")
    print(f"    request + key:                 {statistics.median(floor_us):8.1f} us/call")
    print(f"    request + key + ScriptedModel: {statistics.median(model_us):8.1f} us/call")
    print(
        f"    ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


def bench_client(calls: int, rounds: int) -> None:
    requests = [CompletionRequest.chat(p) for p in _prompts(calls)]
    ratios, ours_us, bare_us = [], [], []
    with (
        ScriptedServer() as server,
        OpenAICompatible(server.base_url, "scripted", api_key_env=None) as ours,
        httpx.Client() as bare,
    ):
        url = f"{server.base_url}/chat/completions"
        bodies = [json.dumps(request_to_openai(q, "scripted")).encode() for q in requests]
        ours.complete(requests[0])  # connect both before timing
        bare.post(url, content=bodies[0], headers={"Content-Type": "application/json"})

        def run_ours() -> float:
            start = time.perf_counter()
            for q in requests:
                ours.complete(q)
            return time.perf_counter() - start

        def run_bare() -> float:
            start = time.perf_counter()
            for body in bodies:
                response = bare.post(
                    url, content=body, headers={"Content-Type": "application/json"}
                )
                response.raise_for_status()
                response.json()
            return time.perf_counter() - start

        for r in range(rounds):
            first, second = (run_bare, run_ours) if r % 2 == 0 else (run_ours, run_bare)
            a, b = first(), second()
            t_bare, t_ours = (a, b) if first is run_bare else (b, a)
            ratios.append(t_ours / t_bare)
            ours_us.append(t_ours / calls * 1e6)
            bare_us.append(t_bare / calls * 1e6)
    print(f"(b) client: {calls} sequential calls x {rounds} rounds against ScriptedServer")
    print(f"    httpx.Client.post + json: {statistics.median(bare_us):8.0f} us/call")
    print(f"    OpenAICompatible.complete: {statistics.median(ours_us):7.0f} us/call")
    print(
        f"    ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


def bench_overlap(calls: int, latency: float = 0.2, concurrency: int = 64) -> None:
    requests = [
        (CompletionRequest.chat(f"question {i}"), CallSite(f"a{i}", 0)) for i in range(calls)
    ]
    ideal = calls * latency / concurrency
    with ScriptedServer(latency=latency) as server:
        with OpenAICompatible(
            server.base_url, "scripted", api_key_env=None, concurrency=concurrency
        ) as client:
            client.complete(CompletionRequest.chat("warm up"))
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(lambda p: client.complete(p[0], site=p[1]), requests))
            threads = time.perf_counter() - start
            peak_threads = server.peak_in_flight

        client = OpenAICompatible(
            server.base_url, "scripted", api_key_env=None, concurrency=concurrency
        )

        async def main() -> float:
            async with client:
                await client.acomplete(CompletionRequest.chat("warm up"))
                start = time.perf_counter()
                await asyncio.gather(*(client.acomplete(q, site=s) for q, s in requests))
                return time.perf_counter() - start

        asyncio_wall = asyncio.run(main())
        peak = server.peak_in_flight
    print(f"(c) overlap: {calls} calls, {latency * 1000:.0f} ms replies, concurrency {concurrency}")
    print(f"    ideal {ideal:.2f} s")
    print(f"    threads {threads:.2f} s = {threads / ideal:.2f}x ideal (peak {peak_threads})")
    print(f"    asyncio {asyncio_wall:.2f} s = {asyncio_wall / ideal:.2f}x ideal (peak {peak})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print(f"Python {platform.python_version()} on {platform.machine()}, httpx {httpx.__version__}")
    bench_scripted(5000 // scale, args.rounds)
    bench_client(500 // scale, args.rounds)
    bench_overlap(1280 // scale)


if __name__ == "__main__":
    main()
