"""The conformance model with ``async def`` actions that await seeded random tiny delays.

Module-level, so worker processes can import it (the test files put this
directory on ``sys.path``). Each async action sleeps for a delay drawn from
``ctx.rng`` before (and sometimes after) doing the same work as its
synchronous twin in ``_engine_models``, so on a backend that overlaps the
awaits the coroutines finish in a random order, not in id order; the results
must not show it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from _engine_models import Auditor, Trader, tick

from simulacra import Agent, Context, Model, Phase, Sequence

#: For tests only (read in-process): coroutines in flight now, the most at once, and
#: the agent ids in the order their coroutines finished. Never part of a result.
PROBE: dict[str, Any] = {"in_flight": 0, "max": 0, "done": []}


def reset_probe() -> None:
    """Clear :data:`PROBE`."""
    PROBE.update(in_flight=0, max=0, done=[])


async def pause(ctx: Context) -> None:
    """Sleep 0.05 to 1 ms, a seeded draw of this agent's stream (the I/O of an action)."""
    PROBE["in_flight"] += 1
    PROBE["max"] = max(PROBE["max"], PROBE["in_flight"])
    try:
        await asyncio.sleep(0.00005 + ctx.rng.random() * 0.001)
    finally:
        PROBE["in_flight"] -= 1


class AsyncTrader(Trader):
    """Trader whose offers and settlements await I/O first."""

    async def offer(self, ctx: Context) -> None:
        await pause(ctx)
        Trader.offer(self, ctx)
        if ctx.rng.random() < 0.5:
            await pause(ctx)  # awaits after sending, too
            ctx.send(self.partners[1], "late", ctx.rng.random())
        PROBE["done"].append(self.id)

    async def settle(self, ctx: Context) -> None:
        await pause(ctx)
        Trader.settle(self, ctx)


class AsyncVipTrader(AsyncTrader):
    """A subclass with an async phase of its own."""

    async def bonus(self, ctx: Context) -> None:
        await pause(ctx)
        self.cash += ctx.rng.random()


class AsyncAuditor(Auditor):
    """Auditor that awaits before auditing."""

    async def audit(self, ctx: Context) -> None:
        await pause(ctx)
        Auditor.audit(self, ctx)


async def async_tick(agent: Agent, ctx: Context) -> None:
    """A module-level async action: runs on every agent."""
    await pause(ctx)
    tick(agent, ctx)


class Failing(Agent):
    """Fails (after awaiting) at step 1 if its id is >= 3; higher ids fail sooner."""

    async def act(self, ctx: Context) -> None:
        await asyncio.sleep(0.0001 * (20 - self.id))
        if ctx.step == 1 and self.id >= 3:
            raise ValueError(f"agent {self.id} fails on purpose")
        ctx.send((self.id + 1) % 10, "hi", ctx.step)


class Lost(Agent):
    """Sends to an agent that does not exist, after awaiting (ids >= 4, at step 1)."""

    async def act(self, ctx: Context) -> None:
        await asyncio.sleep(0.0001 * (20 - self.id))
        if ctx.step == 1 and self.id >= 4:
            ctx.send(99, "lost", None)


class SyncFailing(Agent):
    """A plain action that fails for agent 4 at step 0: no later agent's action is called."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.ran = False

    def act(self, ctx: Context) -> None:
        self.ran = True
        if self.id == 4:
            raise RuntimeError("agent 4 fails on purpose")


ASYNC_SEQUENCE = Sequence(
    AsyncTrader.offer,
    Phase(AsyncTrader.settle, receivers_only=True),
    Phase(AsyncVipTrader.bonus, name="vip bonus"),
    Sequence(Trader.report, AsyncAuditor.audit),  # a plain action among async ones
    async_tick,
)


def async_model(backend: Any = None, *, traders: int = 23, auditors: int = 2,
                string_ids: bool = False, seed: int | str = 2024, settings: Any = None) -> Model:
    """The conformance model, with async actions."""
    def ident(n: int) -> Any:
        return f"agent-{n:03d}" if string_ids else n

    total = traders + auditors
    auditor_ids = [ident(n) for n in range(traders, total)]
    model = Model(seed=seed, backend=backend, settings=settings,
                  world={"fee": 0.01, "auditors": auditor_ids})
    for n in reversed(range(traders)):
        partners = [ident((n + k) % traders) for k in (1, 3, 7)]
        cls = AsyncVipTrader if n % 5 == 0 else AsyncTrader
        model.add(cls, ident(n), cash=100.0 + n, partners=partners)
    model.add_many(AsyncAuditor, auditor_ids)
    return model


class Repeater(Agent):
    """Broadcasts to a tuple that names some agents twice; records its inbox as Messages."""

    def __init__(self, id: int, *, fan_out: bool) -> None:
        super().__init__(id)
        self.fan_out = fan_out
        self.got: list[tuple[Any, ...]] = []
        self.payloads: list[Any] = []

    def act(self, ctx: Context) -> None:
        self.got.append(tuple(tuple(m) for m in ctx.inbox()))
        self.payloads.append(ctx.payloads("b"))
        to = (1, 1, 2, 0, 1)
        if self.fan_out:  # one broadcast: one fan-out entry
            ctx.broadcast("b", (self.id, ctx.step), to=to)
        else:  # the same messages, one send each
            for recipient in to:
                ctx.send(recipient, "b", (self.id, ctx.step))
        ctx.send(2, "s", ctx.step)
