"""Restoring paused greenlet agents by deterministic re-execution from the LLM recordings.

A paused greenlet's stack cannot be pickled, so a run of pausable agents is
restored by running it again from the start with every model call served from
the recordings of the first run -- zero model calls -- up to the point of
interest. The re-executed agents must be exactly where the originals were
(status, pause reason, calls made, trace so far), and a run that continues
from there must end with the uninterrupted run's trace.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from simulacra import AgentStatus, PausableHost, Trace
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    LatencyModel,
    RecordingModel,
    RecordingStore,
    ReplayModel,
    ScriptedModel,
)

AGENTS = 40
STOP, CUT = 12.0, 5.0


def worker(ctx: Any, rounds: int) -> str:
    said = []
    for i in range(rounds):
        reply = ctx.llm.complete(CompletionRequest.chat(f"{ctx.name}: round {i}, said {len(said)}"))
        said.append(reply.text[:24])
        ctx.record("said", said[-1])
        ctx.sleep(ctx.rng("think").random())
        if i % 2 == 1:
            verdict = ctx.pause(("review", i))
            ctx.record("verdict", verdict)
    return "|".join(said)


class Switch:
    """Serves from one model until told to use the other (replay, then live)."""

    def __init__(self, first: Any, then: Any) -> None:
        self.first, self.then, self.live = first, then, False

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        model = self.then if self.live else self.first
        completion: Completion = model.complete(request, site=site)
        return completion


class Driver:
    """The host side: advance time in half units; resume paused agents in a seeded order."""

    def __init__(self, model: Any) -> None:
        self.host = PausableHost(seed=3, trace=True, llm=model,
                                 latency=LatencyModel(base=0.3, min_duration=0.1))
        self.agents = [self.host.spawn(worker, 6, name=f"a{i:02d}") for i in range(AGENTS)]
        for agent in self.agents:
            self.host.start(agent)
        self.order = random.Random(99)
        self.t = 0.0

    def drive(self, until: float) -> None:
        """Resume the paused agents (seeded order), then run half a unit; repeat.

        It returns right after a run, so agents that paused in it stay PAUSED.
        """
        while self.t < until:
            paused = [a for a in self.agents if a.status is AgentStatus.PAUSED]
            self.order.shuffle(paused)
            for agent in paused:
                self.host.resume(agent, f"ok {agent.name} at {self.host.now}")
            self.t += 0.5
            self.host.run(until=self.t)

    def where(self) -> list[tuple[str, str, Any, int]]:
        return [(a.name, a.status.name, a.pause_reason, a.llm_calls) for a in self.agents]

    def trace(self) -> Trace:
        return Trace(self.host.sim.trace_records or ())


def test_paused_agents_are_restored_by_re_execution(tmp_path: Path) -> None:
    with RecordingStore(tmp_path / "calls.sqlite") as store:
        original = Driver(RecordingModel(ScriptedModel(1), store))
        original.drive(CUT)
        at_cut, trace_at_cut = original.where(), original.trace()
        original.drive(STOP)
        whole = original.trace()
        original.host.close()
        statuses = [status for _, status, _, _ in at_cut]
        assert statuses.count("PAUSED") >= 3  # the cut holds paused agents, mid-function
        assert "DONE" not in statuses

        replay = ReplayModel(store, strict=True)
        live = ScriptedModel(1)
        switch = Switch(replay, live)
        restored = Driver(switch)
        restored.drive(CUT)

        assert restored.where() == at_cut  # every agent exactly where it was
        assert restored.trace() == trace_at_cut
        served = replay.calls_served
        assert served == sum(calls for *_, calls in at_cut) > 0  # all from the recordings

        switch.live = True  # from here on, a live model, as a resumed run would
        restored.drive(STOP)
        assert restored.trace() == whole
        assert restored.trace().digest() == whole.digest()
        restored.host.close()
