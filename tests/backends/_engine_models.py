"""Agent models for the engine tests: module-level, so worker processes can import them.

The test files put this directory on ``sys.path`` before importing it; spawned
workers inherit ``sys.path`` and import it by the same name.

The conformance model exercises everything that could make a backend differ
from the reference: random draws (``ctx.rng``), sends and broadcasts (to lists,
to sets, to everyone), mutable and immutable payloads, a phase restricted by
class, a phase restricted with ``only=``, a ``receivers_only`` phase, a
module-level action that runs on every agent, and the shared world.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from simulacra import Agent, Context, Model, Phase, Sequence

# --------------------------------------------------------------------------- conformance


class Trader(Agent):
    """Makes random offers to random partners; settles what it receives."""

    def __init__(self, id: Any, *, cash: float, partners: list[Any]) -> None:
        super().__init__(id)
        self.cash = cash
        self.partners = partners
        self.seen: list[list[Any]] = []
        self.ticks = 0

    def offer(self, ctx: Context) -> None:
        rng = ctx.rng
        partner = self.partners[rng.randrange(len(self.partners))]
        amount = round(rng.uniform(0.0, 10.0), 6)
        ctx.send(partner, "offer", {"amount": amount, "from": self.id, "tags": [ctx.step]})
        if rng.random() < 0.5:
            ctx.broadcast("ping", (self.id, ctx.step), to=set(self.partners))

    def settle(self, ctx: Context) -> None:
        # receivers_only: every trader that runs here has at least one message.
        inbox = ctx.inbox()
        assert inbox
        self.seen.append([(m.phase, m.sender, m.seq, m.topic) for m in inbox])
        for message in ctx.inbox("offer"):
            fee = ctx.world["fee"] if ctx.world is not None else 0.0
            self.cash += message.payload["amount"] * (1.0 - fee)
            message.payload["tags"].append("mutated by the recipient")
        ctx.send(self.partners[0], "thanks", len(inbox))

    def report(self, ctx: Context) -> None:
        ctx.broadcast("cash", self.cash, to=ctx.world["auditors"] if ctx.world else ())


class VipTrader(Trader):
    """A subclass: runs Trader phases, and one phase of its own."""

    def bonus(self, ctx: Context) -> None:
        self.cash += ctx.rng.random()


class Auditor(Agent):
    """Sums the cash reports and tells everyone the total."""

    def __init__(self, id: Any) -> None:
        super().__init__(id)
        self.totals: list[float] = []

    def audit(self, ctx: Context) -> None:
        total = sum(ctx.payloads("cash"))
        self.totals.append(total)
        ctx.broadcast("total", total)  # to every agent of the model, this one included


def tick(agent: Agent, ctx: Context) -> None:
    """A module-level action: runs on every agent."""
    if isinstance(agent, Trader):
        agent.ticks += len(ctx.inbox("total")) + ctx.rng.randrange(3)


CONFORMANCE_SEQUENCE = Sequence(
    Trader.offer,
    Phase(Trader.settle, receivers_only=True),
    Phase(VipTrader.bonus, name="vip bonus"),
    Sequence(Trader.report, Auditor.audit),
    tick,
)


def conformance_model(backend: Any = None, *, traders: int = 23, auditors: int = 2,
                      string_ids: bool = False, seed: int = 2024) -> Model:
    """A small model with every feature the backends must agree on."""
    def ident(n: int) -> Any:
        return f"agent-{n:03d}" if string_ids else n

    total = traders + auditors
    auditor_ids = [ident(n) for n in range(traders, total)]
    model = Model(seed=seed, backend=backend, world={"fee": 0.01, "auditors": auditor_ids})
    # Added in reverse order: the order of add() must not matter.
    for n in reversed(range(traders)):
        partners = [ident((n + k) % traders) for k in (1, 3, 7)]
        cls = VipTrader if n % 5 == 0 else Trader
        model.add(cls, ident(n), cash=100.0 + n, partners=partners)
    model.add_many(Auditor, auditor_ids)
    return model


# --------------------------------------------------------------------------- failures


class Faulty(Agent):
    """Raises in its action for one agent at one step."""

    def __init__(self, id: int, *, bad_id: int, bad_step: int) -> None:
        super().__init__(id)
        self.bad_id = bad_id
        self.bad_step = bad_step
        self.runs = 0

    def act(self, ctx: Context) -> None:
        self.runs += 1
        if self.id >= self.bad_id and ctx.step == self.bad_step:
            raise ValueError(f"agent {self.id} fails on purpose")
        ctx.send((self.id + 1) % 10, "hello", self.runs)


class Misaddressed(Agent):
    """Sends to an agent that does not exist."""

    def act(self, ctx: Context) -> None:
        if ctx.step == 1 and self.id == 4:
            ctx.send(99, "lost", None)


class SelfKilling(Agent):
    """Kills its own (worker) process, the way a crash or the OOM killer would."""

    def __init__(self, id: int, *, parent_pid: int) -> None:
        super().__init__(id)
        self.parent_pid = parent_pid

    def act(self, ctx: Context) -> None:
        if ctx.step == 1 and self.id == 2 and os.getpid() != self.parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.send(self.id, "alive", ctx.step)


class Ring(Agent):
    """Passes a counter around a ring; cheap, for lifecycle tests."""

    def __init__(self, id: int, *, size: int) -> None:
        super().__init__(id)
        self.size = size
        self.total = 0

    def act(self, ctx: Context) -> None:
        self.total += sum(ctx.payloads())
        ctx.send((self.id + 1) % self.size, "count", self.total + 1)


# --------------------------------------------------------------------------- phase semantics


class Probe(Agent):
    """Records what it sees in each phase; sends in both phases."""

    def __init__(self, id: Any, *, peers: list[Any]) -> None:
        super().__init__(id)
        self.peers = peers
        self.log: list[tuple[int, str, list[tuple[Any, ...]]]] = []

    def _record(self, ctx: Context) -> None:
        self.log.append((ctx.step, ctx.phase,
                         [(m.phase, m.sender, m.seq, m.topic, m.payload) for m in ctx.inbox()]))

    def first(self, ctx: Context) -> None:
        self._record(ctx)
        for peer in self.peers:
            ctx.send(peer, "first", f"{self.id}@{ctx.step}")
            ctx.send(peer, "first-again", f"{self.id}@{ctx.step}")

    def second(self, ctx: Context) -> None:
        self._record(ctx)
        ctx.broadcast("second", ctx.step, to=self.peers)


PROBE_SEQUENCE = Sequence(Probe.first, Probe.second)


class Sharer(Agent):
    """Sends a mutable payload, then mutates its own copy; receivers mutate theirs."""

    def __init__(self, id: int, *, peers: list[int]) -> None:
        super().__init__(id)
        self.peers = peers
        self.book = {"items": [1, 2, 3]}
        self.received: list[Any] = []

    def give(self, ctx: Context) -> None:
        ctx.send(self.peers[0], "book", self.book)
        ctx.broadcast("books", self.book, to=self.peers)
        self.book["items"].append(99)  # after sending: the recipients must not see it

    def take(self, ctx: Context) -> None:
        for message in ctx.inbox():
            self.received.append(repr(message.payload))
            message.payload["items"].append(f"written by {self.id}")  # own copy only


class Hoarder(Agent):
    """Keeps its Context past the action: a bug the engine must catch."""

    kept: Any = None

    def keep(self, ctx: Context) -> None:
        Hoarder.kept = ctx

    def reuse(self, ctx: Context) -> None:
        Hoarder.kept.send(self.id, "late", None)


class Keeper(Agent):
    """Every third agent keeps its Context; the others do not. Then all report what they see."""

    def __init__(self, id: Any) -> None:
        super().__init__(id)
        self.kept: Any = None
        self.seen: list[Any] = []

    def keep(self, ctx: Context) -> None:
        self.seen.append(ctx.id)
        ctx.send(self.id, "self", ctx.step)
        if self.id % 3 == 0:
            self.kept = ctx

    def report(self, ctx: Context) -> None:
        self.seen.append(ctx.id)
        self.seen.append(list(ctx.payloads("self")))
        if self.kept is not None:
            self.seen.append(self.kept.id)  # a kept context still knows its own agent

    def late(self, ctx: Context) -> None:
        self.kept.send(self.id, "late", None)

    def state(self) -> dict[str, Any]:
        return {"seen": self.seen}


class Drawer(Agent):
    """Draws from ctx.rng in one phase and records the draws."""

    def __init__(self, id: Any) -> None:
        super().__init__(id)
        self.draws: list[float] = []

    def draw(self, ctx: Context) -> None:
        self.draws.append(ctx.rng.random())


class Quiet(Agent):
    """Never draws, never sends."""

    def rest(self, ctx: Context) -> None:
        pass


class WorldReader(Agent):
    """Tries to write to the world."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.outcome = ""

    def read(self, ctx: Context) -> None:
        world = ctx.world
        assert world is not None
        try:
            world["limit"] = 0  # type: ignore[index]
        except TypeError:
            self.outcome = f"read-only; limit={world['limit']}; rates={world['nested']['rates']!r}"


def count_everyone(agent: Agent, ctx: Context) -> None:
    """A module-level action: runs on agents of every class."""
    ctx.send(agent.id, "counted", type(agent).__name__)


class UnpicklableError(Exception):
    """An exception that cannot be pickled (it holds a lambda)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.callback = lambda: None


class Unpicklable(Agent):
    """Raises an exception that cannot cross a process boundary."""

    def act(self, ctx: Context) -> None:
        raise UnpicklableError("this exception cannot be pickled")


class BadInit(Agent):
    """Fails while being built."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.ratio = 1 / 0


class Careless(Agent):
    """Misuses send and broadcast in the way its *mode* says."""

    def __init__(self, id: int, *, mode: str) -> None:
        super().__init__(id)
        self.mode = mode

    def act(self, ctx: Context) -> None:
        if self.mode == "single":
            ctx.broadcast("x", 1, to=2)  # type: ignore[arg-type]
        elif self.mode == "topic":
            ctx.send(2, 7, None)  # type: ignore[arg-type]
        elif self.mode == "float-id":
            ctx.send(2.0, "x", None)  # type: ignore[arg-type]
        elif self.mode == "bool-id":
            ctx.broadcast("x", None, to=[2, True])
        elif self.mode == "str-id":
            ctx.broadcast("x", None, to=["2"])
