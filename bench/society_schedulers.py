"""Against global sync: a barrier per step, lookahead, and an oracle on one LLM workload.

One workload: the social society (``examples/social``) of N agents, each
taking K turns (one model call a turn), against a loopback OpenAI-compatible
mock (``ScriptedServer`` answering from a model that sleeps). By default the
society is a street (``sim.world.local=true``, ``--world local``): each agent
follows its ``--follows`` nearest neighbours on a ring and sees and reaches only
them, a world with the locality of AI Metropolis's town; ``--world global`` is
the demo's feed, whose newest posts everyone sees (no scheduler can run ahead
of anyone there). The schedulers, on one run of the event-driven engine
(``async_event``, threads, ``max_turns=K``), its steps windows of ``--window``
virtual time:

(a) **global sync**: a barrier after every step: each window's end waits for
    every call in flight (``sim.engine.step.options.barrier=true``);
(b) **lookahead**: no barrier: a call whose turn resolves after a window's end
    carries on into the next window; every call whose wake-up lies before the
    horizon ``t0 + min_duration`` runs at once (``docs/events.md``), with
    ``dependencies=false``;
(b') **dependencies**: (b), starting turns early where the world names who
    affects whom (``World.affected_by``; ``docs/events.md``, "Early starts");
(b'') **out of order**: (b'), committing turns to a forward copy of the world
    out of timestamp order, so that an agent runs several turns ahead
    (``out_of_order=true``; ``docs/events.md``, "Out-of-order commit");
(c) **oracle**: an idealised schedule computed, not run, from (b')'s recorded
    dependency graph (below).

(a), (b), (b') and (b'') are one run: their digests must be equal (the script
exits 1 if not). For reference, the round engine's own run is timed too (``round``:
``concurrency`` calls open at once and a barrier after each of K rounds); it
is another engine, whose turns see other worlds, so its digest differs by
design and it is not one of the four.

The mock server. Each call's service time is the seeded latency model of the
bench (prefill per prompt token, decode per completion token over the server's
throughput, a base, lognormal noise with a stream keyed by the request key and
the call site) times ``--scale`` wall seconds per simulated second, and at most
``--capacity`` calls are served at once: the others wait in the server's queue
(a semaphore), as on an inference server with a fixed batch. The reply is
``ScriptedModel(seed=0)``'s, so the replies over HTTP equal the scripted model's
in process, and a repeated run of one scheduler sees the same replies and the
same service times. The server runs in a child process of its own
(``--server process``, the default since 2026-12-06), as an inference server
runs apart from the engine: its HTTP handling then takes none of the run's
CPU or GIL. ``--server thread`` serves from threads of the bench's process, as
the rows before that date did. ``--mode asyncio`` makes the event engine's calls
on one asyncio loop (``sim.engine.mode=asyncio``) rather than on a pool of
threads (the default, ``threads``).

Think time. "Issue the next turn's call as the previous one completes plus its
recorded think time": on (b) an agent's next wake-up is the resolution of its
turn plus an exponential pause (``wake_interval``; ``reaction_delay`` after a
mention or reply), in *simulated* time, and the turn's simulated duration is
the same latency model (its own noise stream). Neither engine paces to the wall
clock: think time costs no wall time, it only places turns on the virtual clock,
and so decides which calls fall inside one lookahead horizon and may run at once.
On the round engine think time is the barrier itself: every agent acts once
per round.
Wall time is therefore the time the server takes to serve the calls as each
scheduler lets them overlap, plus the engines' own cost.

The oracle (c). From (b')'s run directory: ``calls.jsonl`` (one call per turn,
agent and turn), ``action_events.jsonl`` (which turn wrote which post) and the
recordings (the prompt each turn saw). Turn (a, n) depends on (a, n - 1) and
on every turn that wrote a post its prompt shows (``#id`` in FEED and
MENTIONS): what it read is exactly what it depends on, so a schedule that
honours these edges produces the same replies and the same events as (b').
Think time costs no wall time (as in the engines). Each turn takes its
service time (recomputed exactly as the server slept, with no HTTP or engine
cost) on one of ``capacity`` slots; a discrete-event list schedule starts a
ready turn whenever a slot is free, earliest-ready first (ties: (b)'s virtual
wake time). Its makespan is the oracle; ``max(critical path, work /
capacity)`` is printed beside it as a bound no schedule can beat. Likes and
follows are not in the prompt's ``#ids``: their effect is through the agent's
own previous turn (follows) or not visible in the prompt (like counts), so the
graph is exact for this world.

Digests. Each scheduler is run ``--repeat`` times and its digests must be
identical, and (a), (b) and (b')'s must be one.

The bench warns when a scheduler made fewer than N K calls, when a call failed,
and when its slowest call took over 30 s and 20 times the median (a call that
waited out the client's timeout and was retried: a stall, not the scheduler's).

CPU is the process's (``time.process_time``: the engine and the HTTP client,
and with ``--server thread`` the loopback server) during the run.

Mean calls in flight is the sum of the calls' wall seconds (``calls.jsonl``
``wall_s``, client side, queueing at the server included) over the run's wall
time; the peak is a sweep over the intervals ``[at, at + wall_s]``.

Usage::

    python bench/society_schedulers.py --scale 1.0 --capacity 512 --concurrency 512  # 25, 100
    python bench/society_schedulers.py --scale 1.0 --capacity 512 --concurrency 512 \
        --agents 1000 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import math
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from simulacra.llm import (  # noqa: E402
    CallSite,
    Completion,
    CompletionRequest,
    LatencyModel,
    RecordingStore,
    ScriptedModel,
    ScriptedServer,
)
from simulacra.rng import derive_seed  # noqa: E402
from simulacra.societies import build_society, load_config, run_society  # noqa: E402

CONFIG = ROOT / "examples" / "social" / "config.yaml"
#: Simulated seconds: a base, prefill and decode over the server's throughput, noise.
LATENCY = {"base": 0.5, "prefill_per_token": 0.0002, "decode_per_token": 0.01,
           "noise_sigma": 0.5, "min_duration": 0.5}
_TAG = "bench.society_schedulers.server.v1"
_POST_ID = re.compile(r"#(\d+)")


class ServedModel:
    """The scripted model behind a server: at most *capacity* calls served at once,
    each for its seeded service time (simulated seconds x *scale*) of wall time."""

    def __init__(self, capacity: int, scale: float) -> None:
        self.inner = ScriptedModel(seed=0)
        self.latency = LatencyModel.from_dict(LATENCY)
        self.scale = scale
        self._slots = threading.BoundedSemaphore(capacity)
        self._lock = threading.Lock()
        self.serving = self.peak = 0

    def service(self, request: CompletionRequest, completion: Completion,
                site: CallSite | None) -> float:
        """Wall seconds the server serves this call (a pure function of it)."""
        path: tuple[str | int, ...] = (request.key(),)
        if site is not None:
            path += (site.agent, site.n)
        rng = random.Random(derive_seed(0, _TAG, *path))
        return self.latency.duration(request, completion, rng) * self.scale

    def complete(self, request: CompletionRequest, *,
                 site: CallSite | None = None) -> Completion:
        completion = self.inner.complete(request, site=site)
        with self._slots:
            with self._lock:
                self.serving += 1
                self.peak = max(self.peak, self.serving)
            time.sleep(self.service(request, completion, site))
            with self._lock:
                self.serving -= 1
        return completion

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return await asyncio.to_thread(self.complete, request, site=site)


#: The schedulers, in the order they run: (a), (b) and (b') of the module's docstring,
#: and the round engine's run for reference.
SCHEDULERS = ("global sync", "lookahead", "dependencies", "out of order", "round")
EVENT_SCHEDULERS = SCHEDULERS[:4]


def overrides(scheduler: str, agents: int, turns: int, concurrency: int, *, think: float,
              base_url: str, local: bool, follows: int, window: float,
              mode: str = "threads") -> list[str]:
    common = [f"sim.agents={agents}", f"sim.engine.mode={mode}",
              f"sim.engine.concurrency={concurrency}", "sim.llm.provider=openai_compatible",
              f"sim.llm.base_url={base_url}", f"sim.llm.concurrency={concurrency}",
              "sim.llm.timeout=600", "run.checkpoint_every=null",
              f"sim.world.local={'true' if local else 'false'}", f"sim.world.follows={follows}"]
    if scheduler == "round":
        return [*common, "sim.engine.step.built_in=round", f"sim.steps={turns}"]
    latency = [f"sim.llm.latency.{k}={v}" for k, v in LATENCY.items()]
    # Windows of W (enough of them: those after the last turn are empty, and cheap).
    windows = [f"sim.steps={int(turns * 20 / window) + 1}",
               f"sim.engine.step.options.window={window}",
               "sim.engine.step.options.barrier="
               + ("true" if scheduler == "global sync" else "false")]
    return [*common, *latency, "sim.engine.step.built_in=async_event", *windows,
            f"sim.engine.step.options.max_turns={turns}",
            f"sim.engine.step.options.wake_interval={think}",
            f"sim.engine.step.options.reaction_delay={think / 5}",
            "sim.engine.step.options.dependencies="
            + ("true" if scheduler in ("dependencies", "out of order") else "false"),
            "sim.engine.step.options.out_of_order="
            + ("true" if scheduler == "out of order" else "false")]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def in_flight(calls: list[dict[str, Any]], wall: float) -> tuple[float, int]:
    """(mean, peak) calls in flight over *wall* seconds, from their start and length."""
    edges = sorted([(c["at"], 1) for c in calls] + [(c["at"] + c["wall_s"], -1) for c in calls])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return sum(c["wall_s"] for c in calls) / wall, peak


@contextlib.contextmanager
def served(capacity: int, scale: float, where: str) -> Iterator[tuple[str, dict[str, int]]]:
    """The mock server's base URL, and (once the block ends) its ``peak`` of calls served.

    *where* ``process``: in a child process of its own (``--serve``), as a
    real inference server runs beside the engine, not in its interpreter; its
    HTTP handling then takes none of the engine's CPU or GIL. ``thread``: in
    this process (threads), as before ``--server`` existed.
    """
    stats: dict[str, int] = {}
    if where == "thread":
        model = ServedModel(capacity, scale)
        with ScriptedServer(model) as server:
            yield server.base_url, stats
        stats["peak"] = model.peak
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(capacity), str(scale)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        url = child.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"the mock server did not start (it said {url!r})")
        yield url, stats
    finally:
        child.stdin.close()  # the child prints its peak and exits
        tail = child.stdout.read()
        child.wait(30)
    stats["peak"] = json.loads(tail)["peak"]


def serve(capacity: int, scale: float) -> None:
    """``--serve``: the mock server until standard input closes (:func:`served`)."""
    model = ServedModel(capacity, scale)
    with ScriptedServer(model) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
    print(json.dumps({"peak": model.peak}), flush=True)


def run_once(scheduler: str, args: argparse.Namespace, agents: int,
             out: Path) -> dict[str, Any]:
    concurrency = min(agents, args.concurrency)
    with served(args.capacity, args.scale, args.server) as (base_url, stats):
        config = load_config(CONFIG, overrides(scheduler, agents, args.turns, concurrency,
                                               think=args.think, base_url=base_url,
                                               local=args.world == "local",
                                               follows=args.follows, window=args.window,
                                               mode=args.mode))
        start, cpu = time.perf_counter(), time.process_time()
        run = run_society(config, out=out)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    lines = read_jsonl(out / "calls.jsonl")
    for warning in call_warnings(scheduler, lines, agents * args.turns):
        print(f"  warning: {warning}")
    calls = [c for c in lines if c.get("ok", True)]
    mean, peak = in_flight(calls, wall)
    return {"wall_s": wall, "digest": run.result.digest, "calls": len(calls),
            "mean": mean, "peak": peak, "served_peak": stats["peak"], "cpu_s": cpu}


def call_warnings(scheduler: str, lines: list[dict[str, Any]], expected: int) -> list[str]:
    """What is off in a run's ``calls.jsonl`` *lines*: too few calls, failed ones, a stall.

    A stall is a call slower than 30 s and 20 times the median: one that waited
    out the client's timeout and was retried. Its wall time is in the run's, and
    is not the scheduler's doing.
    """
    calls = [c for c in lines if c.get("ok", True)]
    warnings = []
    if len(calls) != expected:
        warnings.append(f"{scheduler} made {len(calls)} calls, not {expected}")
    if len(calls) != len(lines):
        warnings.append(f"{scheduler}: {len(lines) - len(calls)} calls failed")
    if calls:
        took = sorted(c["wall_s"] for c in calls)
        median = took[len(took) // 2]
        if took[-1] > max(30.0, 20 * median):
            warnings.append(f"{scheduler}: its slowest call took {took[-1]:.1f} s (median "
                            f"{median:.2f} s): a stall, not the scheduler's; run it again")
    return warnings


def recorded_turns(run_dir: Path, scale: float) -> dict[tuple[str, int], dict[str, Any]]:
    """(b')'s turns: service time ``s``, wake ``w``, resolution ``r``, dependencies ``deps``."""
    served = ServedModel(1, scale)
    calls = [c for c in read_jsonl(run_dir / "calls.jsonl") if c.get("ok", True)]
    writer: dict[int, tuple[str, int]] = {}
    resolved: dict[tuple[str, int], float] = {}
    for event in read_jsonl(run_dir / "action_events.jsonl"):
        data = event.get("data") or {}
        turn = (event["agent"], event.get("turn", event["step"]))
        resolved.setdefault(turn, event["time"])
        if event["kind"] in ("post", "reply") and "post" in data:
            # The writing turn: ``turn`` (an event's ``step`` is its window on the event
            # engine; on the round engine, which stamps no turn, its step is its turn).
            writer[data["post"]] = turn
    turns: dict[tuple[str, int], dict[str, Any]] = {}
    with RecordingStore(run_dir / "llm_recordings.sqlite", readonly=True) as store:
        for call in calls:
            request = store.request(call["key"])
            assert request is not None, call
            site = CallSite(call["agent"], call["n"])
            completion = served.inner.complete(request, site=site)
            me = (call["agent"], call["turn"])
            deps = {writer[int(p)] for p in _POST_ID.findall(request.prompt) if int(p) in writer}
            if call["turn"] > 0:
                deps.add((call["agent"], call["turn"] - 1))
            deps.discard(me)
            turns[me] = {"s": served.service(request, completion, site), "deps": deps,
                         "w": call["t"], "r": resolved.get(me, math.inf)}
    for turn in turns.values():  # a dependency with no call (a failed turn) costs nothing
        turn["deps"] = {d for d in turn["deps"] if d in turns}
    return turns


def list_schedule(turns: dict[tuple[str, int], dict[str, Any]], slots: int,
                  started: dict[tuple[str, int], set[tuple[str, int]]] | None = None) -> float:
    """The makespan of a list schedule on *slots*: a turn is ready once its ``deps``
    have finished (and the turns *started* names for it have started); the ready
    turn of the earliest ready time, then wake time, takes a free slot first."""
    started = started or {}
    waiting = {k: len(t["deps"]) + len(started.get(k, ())) for k, t in turns.items()}
    on_finish: dict[tuple[str, int], list[tuple[str, int]]] = {k: [] for k in turns}
    on_start: dict[tuple[str, int], list[tuple[str, int]]] = {k: [] for k in turns}
    for key, turn in turns.items():
        for dep in turn["deps"]:
            on_finish[dep].append(key)
        for dep in started.get(key, ()):
            on_start[dep].append(key)
    ready = [(0.0, turns[k]["w"], k) for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    busy: list[tuple[float, tuple[str, int]]] = []
    now = end = 0.0

    def release(users: list[tuple[str, int]], when: float) -> None:
        for user in users:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (when, turns[user]["w"], user))

    while ready or busy:
        if ready and len(busy) < slots and ready[0][0] <= now:
            _, _, key = heapq.heappop(ready)
            heapq.heappush(busy, (now + turns[key]["s"], key))
            release(on_start[key], now)
        elif busy and (not ready or len(busy) >= slots or busy[0][0] <= ready[0][0]):
            now, key = heapq.heappop(busy)
            end = max(end, now)
            release(on_finish[key], now)
        elif ready:
            now = max(now, ready[0][0])
    return end


def oracle(run_dir: Path, capacity: int, scale: float) -> dict[str, float]:
    """The list schedule of (b)'s recorded turns on *capacity* slots (module docstring)."""
    turns = recorded_turns(run_dir, scale)
    # Critical path (the graph is acyclic: a turn reads only posts resolved before it woke).
    finish: dict[tuple[str, int], float] = {}
    for key in sorted(turns, key=lambda k: turns[k]["w"]):
        finish[key] = max((finish[d] for d in turns[key]["deps"]), default=0.0) + turns[key]["s"]
    critical = max(finish.values(), default=0.0)
    work = sum(t["s"] for t in turns.values())
    return {"oracle_s": list_schedule(turns, capacity), "bound_s": max(critical, work / capacity),
            "critical_s": critical, "work_s": work, "turns": len(turns)}


def neighbourhoods(args: argparse.Namespace, agents: int) -> dict[str, frozenset[str]] | None:
    """Each agent's ``World.affected_by`` in the bench's world (None: everyone: --world global)."""
    config = load_config(CONFIG, overrides("dependencies", agents, args.turns, 1, think=args.think,
                                           base_url="http://127.0.0.1:1/v1",
                                           local=args.world == "local", follows=args.follows,
                                           window=args.window))
    world, _ = build_society(config)
    if args.world != "local":
        return None
    return {str(h): frozenset(map(str, world.affected_by(h) or ())) for h in world.handles}


def forward_estimate(run_dir: Path, near: dict[str, frozenset[str]] | None, slots: int,
                     scale: float) -> float:
    """An estimate, not a run: a conservative out-of-order scheduler on (b')'s turns.

    What a scheduler that commits turns out of timestamp order where the world
    says they are independent (``World.affected_by``) could reach, with the
    knowledge a real one has: a turn of agent ``a`` waking at ``w`` starts once
    ``a``'s previous turn has returned and, for every neighbour ``b`` of ``a``
    (*near*; everyone if None), every turn of ``b`` that woke before ``w`` has
    either returned (its resolution time is known only then) or, if it woke
    less than ``min_duration`` before ``w`` (so it cannot resolve before
    ``w``), at least started. Triggers and the cost of the engine are not
    counted. With everyone as the neighbours this is the in-order engine's
    own limit.
    """
    turns = recorded_turns(run_dir, scale)
    by_agent: dict[str, list[tuple[float, tuple[str, int]]]] = {}
    for key, turn in turns.items():
        by_agent.setdefault(key[0], []).append((turn["w"], key))
    for keys in by_agent.values():
        keys.sort()
    everyone = frozenset(by_agent)
    gated: dict[tuple[str, int], dict[str, Any]] = {}
    started: dict[tuple[str, int], set[tuple[str, int]]] = {}
    least = LATENCY["min_duration"]
    for key, turn in turns.items():
        agent, n = key
        deps = {(agent, n - 1)} & turns.keys()
        first: set[tuple[str, int]] = set()
        for other in (everyone if near is None else near.get(agent, everyone)):
            if other == agent:
                continue
            for wake, theirs in by_agent.get(other, ()):
                if wake >= turn["w"]:
                    break
                if turns[theirs]["r"] <= turn["w"] or wake + least <= turn["w"]:
                    deps.add(theirs)
                else:
                    first.add(theirs)
        gated[key] = {**turn, "deps": deps}
        started[key] = first
    return list_schedule(gated, slots, started)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), float(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="25,100", help="comma-separated sizes")
    parser.add_argument("--turns", type=int, default=4, help="turns (calls) per agent")
    parser.add_argument("--repeat", type=int, default=2, help="runs per scheduler")
    parser.add_argument("--capacity", type=int, default=64, help="calls the server serves at once")
    parser.add_argument("--concurrency", type=int, default=256,
                        help="engine and client calls open at once (at most N)")
    parser.add_argument("--scale", type=float, default=0.1,
                        help="wall seconds the server takes per simulated second")
    parser.add_argument("--think", type=float, default=0.5,
                        help="mean simulated think time (wake_interval) of (b)")
    parser.add_argument("--world", choices=("local", "global"), default="local",
                        help="local: a street (each agent sees and reaches its nearest "
                             "--follows neighbours); global: the social demo's feed, whose "
                             "newest posts everyone sees")
    parser.add_argument("--follows", type=int, default=4, help="neighbours an agent follows")
    parser.add_argument("--window", type=float, default=1.0,
                        help="a step of the event engine: a window of this much virtual time "
                             "(global sync waits for every call in flight at its end)")
    parser.add_argument("--server", choices=("process", "thread"), default="process",
                        help="where the mock server runs: a child process of its own (as a "
                             "real server runs apart from the engine), or threads of this one")
    parser.add_argument("--mode", choices=("threads", "asyncio"), default="threads",
                        help="where the event engine's model calls run (sim.engine.mode): a "
                             "pool of threads, or one asyncio loop")
    args = parser.parse_args()
    for name in ("turns", "repeat", "capacity", "concurrency", "follows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("scale", "think", "window"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be above 0, got {getattr(args, name)}")
    print(f"latency (simulated s) {LATENCY}, x{args.scale} wall; server capacity "
          f"{args.capacity}; {args.turns} turns an agent; think {args.think}; event engine "
          f"steps: windows of {args.window}")
    rows = []
    failed = False
    for agents in (int(a) for a in args.agents.split(",")):
        with tempfile.TemporaryDirectory(prefix="simulacra-sched-") as tmp:
            results: dict[str, list[dict[str, Any]]] = {}
            for scheduler in SCHEDULERS:
                results[scheduler] = [
                    run_once(scheduler, args, agents, Path(tmp) / f"{scheduler[0]}{i}")
                    for i in range(args.repeat)]
            best = oracle(Path(tmp) / "d0", args.capacity, args.scale)
            own = oracle(Path(tmp) / "r0", args.capacity, args.scale)
            slots = min(agents, args.concurrency, args.capacity)
            near = neighbourhoods(args, agents)
            ahead = forward_estimate(Path(tmp) / "d0", near, slots, args.scale)
            in_order = forward_estimate(Path(tmp) / "d0", None, slots, args.scale)
        sync = min(r["wall_s"] for r in results["global sync"])
        print(f"\nN={agents}: oracle {best['oracle_s']:.2f} s over {best['turns']} turns "
              f"(bound {best['bound_s']:.2f} s: critical path {best['critical_s']:.2f} s, "
              f"work/capacity {best['work_s'] / args.capacity:.2f} s)")
        print(f"  the round engine's own graph: oracle {own['oracle_s']:.2f} s "
              f"(bound {own['bound_s']:.2f} s)")
        print(f"  estimates on {slots} slots, not runs (forward_estimate): in timestamp order "
              f"{in_order:.2f} s ({best['oracle_s'] / in_order:.0%} of the oracle); out of "
              f"order where affected_by allows {ahead:.2f} s ({best['oracle_s'] / ahead:.0%})")
        for scheduler, runs in results.items():
            wall = min(r["wall_s"] for r in runs)
            mine = own if scheduler == "round" else best
            first = runs[0]
            same = len({r["digest"] for r in runs}) == 1
            row = {"agents": agents, "scheduler": scheduler, "wall_s": wall,
                   "calls": first["calls"], "mean": first["mean"], "peak": first["peak"],
                   "oracle_share": mine["oracle_s"] / wall, "speedup": sync / wall,
                   "same_digest": same, "runs": len(runs)}
            rows.append(row)
            print(f"  {scheduler:<12} wall {wall:7.2f} s  calls {row['calls']:5d}  in flight "
                  f"mean {row['mean']:6.1f} peak {row['peak']:4d}  x{row['speedup']:.2f} "
                  f"over sync  {row['oracle_share']:.0%} of its oracle  "
                  f"cpu {first['cpu_s']:5.1f} s  digests of {len(runs)} runs identical: {same}")
        event_digests = {r["digest"] for s in EVENT_SCHEDULERS for r in results[s]}
        if len(event_digests) != 1:
            failed = True
            print("  MISMATCH: the event engine's digests differ between global sync, "
                  f"lookahead, dependencies and out of order: "
                  f"{sorted(d[:12] for d in event_digests)}")
        else:
            print(f"  global sync, lookahead, dependencies and out of order: one digest "
                  f"({next(iter(event_digests))[:12]}); the round engine, another engine, "
                  f"{results['round'][0]['digest'][:12]}")
    print("\n| N | scheduler | wall s | calls | in flight mean | peak | x sync | of its oracle "
          "| digests equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['agents']} | {r['scheduler']} | {r['wall_s']:.2f} | {r['calls']} | "
              f"{r['mean']:.1f} | {r['peak']} | {r['speedup']:.2f} | {r['oracle_share']:.0%} | "
              f"{r['same_digest']} ({r['runs']} runs) |")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
