"""Random model descriptions and one interpreter that runs them on SimPy or simulacra.

A *model* is plain data (a :class:`Model` of tuples and lists), never code. The same
interpreter runs it on either kernel through an adapter that maps the API
(``env.timeout`` versus ``sim.delay`` and so on) and logs every observable resume point:

``(now, pid, what, value, active, state)``

where *value* is normalised to plain data (condition values become lists of
``(label, value)`` in the kernel's own order, exceptions become
``("EXC", type name, args, cause type name)``, preemptions become
``("PREEMPTED", by pid, usage_since, resource label)``), *active* says whether
``active_process`` was the logging process and *state* is a snapshot of every shared
resource, container and store. Two kernels with the same semantics give
identical logs.

Op reference (each op is a tuple, first item the kind):

* ``("delay", d, value)``: yield a timeout.
* ``("sleep", d, value)``: yield a timeout made in the ``yield`` itself and never held,
  which the kernel may elide (the process waits in the timeout's place).
* ``("peek", target, keep)``: read another process's ``target`` (an elided timeout's
  event comes back); with *keep* it becomes the event a later ``reyield`` waits on.
* ``("use", r, hold, priority, preempt, mode, patience)``: request resource *r* in a
  ``with`` block, hold it for *hold*. *mode* is ``"with"``, ``"explicit"`` (also yield
  ``release(req)`` inside the block), ``"manual"`` (no ``with``; cancel on interrupt) or
  ``"renege"`` (``yield req | delay(patience)``).
* ``("cput", c, amount)`` / ``("cget", c, amount)``: container put / get.
* ``("sput", s, item, priority)`` / ``("sget", s, filter_name)``: store put / get.
* ``("sputs", s, [(item, priority), ...])``: several puts, none of them waited for.
* ``("spawn", program, wait)``: start a child process, optionally yield it.
* ``("join", target)``: yield the process with pid ``target % len(procs)`` (not self).
* ``("interrupt", target, cause, allow_unstarted)``: interrupt another live process.
* ``("cond", tree)``: yield a condition built from *tree* (see :func:`Ctx.build`).
* ``("succeed", k, value)`` / ``("fail", k, message)`` / ``("renew", k)``: shared events.
* ``("wait", k)``: yield shared event *k*.
* ``("reyield",)``: yield the last event this process waited on again.
* ``("observe", kind, index)``: log the state of a resource, container or store.
* ``("raise", message)``: raise ``ValueError(message)`` (always the last op).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

INF = math.inf

# --------------------------------------------------------------------------- adapters


FILTERS = {
    "any": lambda item: True,
    "even": lambda item: item % 2 == 0,
    "odd": lambda item: item % 2 == 1,
    "big": lambda item: item >= 5,
}


class SimPyAdapter:
    """The reference: SimPy 4.1.2."""

    name = "simpy"

    def __init__(self) -> None:
        import simpy
        from simpy.events import ConditionValue
        from simpy.resources.resource import Preempted
        from simpy.resources.store import PriorityItem

        self.simpy = simpy
        self.Interrupt = simpy.Interrupt
        self.EmptySchedule = simpy.core.EmptySchedule
        self.ConditionValue = ConditionValue
        self.Preempted = Preempted
        self.PriorityItem = PriorityItem
        self.Resource = simpy.Resource
        self.PriorityResource = simpy.PriorityResource
        self.PreemptiveResource = simpy.PreemptiveResource
        self.Container = simpy.Container
        self.Store = simpy.Store
        self.FilterStore = simpy.FilterStore
        self.PriorityStore = simpy.PriorityStore

    def new_env(self, **_kw: Any) -> Any:
        return self.simpy.Environment()

    def timeout(self, env: Any, delay: float, value: Any = None) -> Any:
        return env.timeout(delay, value)

    def event(self, env: Any) -> Any:
        return env.event()

    def all_of(self, env: Any, events: list[Any]) -> Any:
        return env.all_of(events)

    def any_of(self, env: Any, events: list[Any]) -> Any:
        return env.any_of(events)

    def spawn(self, env: Any, gen: Any) -> Any:
        return env.process(gen)

    def cancel_request(self, res: Any, req: Any) -> Any:
        # SimPy's release() of a queued request leaves it queued; cancel() first.
        req.cancel()
        return res.release(req)

    def run(self, env: Any, until: Any = None) -> Any:
        return env.run(until)

    def step(self, env: Any) -> None:
        env.step()

    def peek(self, env: Any) -> float:
        return env.peek()

    def until_not_triggered(self, exc: BaseException) -> bool:
        return isinstance(exc, RuntimeError) and str(exc).startswith("No scheduled events left")


class SimulacraAdapter:
    """The kernel under test."""

    name = "simulacra"

    def __init__(self) -> None:
        import simulacra

        self.sl = simulacra
        self.Interrupt = simulacra.Interrupt
        self.EmptySchedule = simulacra.EmptySchedule
        self.ConditionValue = simulacra.ConditionValue
        self.Preempted = simulacra.Preempted
        self.PriorityItem = simulacra.PriorityItem
        self.Resource = simulacra.Resource
        self.PriorityResource = simulacra.PriorityResource
        self.PreemptiveResource = simulacra.PreemptiveResource
        self.Container = simulacra.Container
        self.Store = simulacra.Store
        self.FilterStore = simulacra.FilterStore
        self.PriorityStore = simulacra.PriorityStore

    def new_env(self, **kw: Any) -> Any:
        return self.sl.Sim(seed=42, **kw)

    def timeout(self, env: Any, delay: float, value: Any = None) -> Any:
        return env.delay(delay, value=value)

    def event(self, env: Any) -> Any:
        return env.event()

    def all_of(self, env: Any, events: list[Any]) -> Any:
        return env.all_of(events)

    def any_of(self, env: Any, events: list[Any]) -> Any:
        return env.any_of(events)

    def spawn(self, env: Any, gen: Any) -> Any:
        return env.spawn(gen)

    def cancel_request(self, res: Any, req: Any) -> Any:
        # simulacra: releasing a request still waiting in the queue cancels it.
        return res.release(req)

    def run(self, env: Any, until: Any = None) -> Any:
        return env.run(until)

    def step(self, env: Any) -> None:
        env.step()

    def peek(self, env: Any) -> float:
        return env.peek()

    def until_not_triggered(self, exc: BaseException) -> bool:
        # simulacra raises EmptySchedule where SimPy raises a RuntimeError.
        return isinstance(exc, self.EmptySchedule)


async def as_coroutine(gen: Any) -> Any:
    """Drive the generator *gen* from an ``async def`` process: each event it yields
    is awaited, and what the ``await`` gives or raises is passed back into *gen*."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            ev = gen.send(value) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            value = await ev
            error = None
        except Exception as e:
            value, error = None, e


# --------------------------------------------------------------------------- models


@dataclass
class Model:
    """A model as plain data."""

    resources: list[tuple[str, int]] = field(default_factory=list)  # (kind, capacity)
    containers: list[tuple[float, float]] = field(default_factory=list)  # (capacity, init)
    stores: list[tuple[str, float]] = field(default_factory=list)  # (kind, capacity)
    n_events: int = 1
    programs: list[list[tuple[Any, ...]]] = field(default_factory=list)
    #: For the ``split`` mode: a time, ``"P0"`` (process 0) or ``"E0"`` (shared event 0).
    until: float | str | None = None


@dataclass
class Outcome:
    """What one run of a model showed."""

    log: list[tuple[Any, ...]]
    now: float
    crash: tuple[Any, ...] | None
    final: tuple[Any, ...]
    pause: tuple[Any, ...] | None = None


class Ctx:
    """Interpreter state for one run of one model on one kernel."""

    def __init__(self, adapter: Any, model: Model, use_async: bool = False, **env_kw: Any) -> None:
        a = self.a = adapter
        self.use_async = use_async
        self.model = model
        self.env = env = a.new_env(**env_kw)
        self.log: list[tuple[Any, ...]] = []
        self.procs: list[Any] = []
        self.started: list[bool] = []
        self.pid_of: dict[int, int] = {}
        self.labels: dict[int, str] = {}
        self._keep: list[Any] = []  # keeps labelled objects alive so ids stay unique
        self.resources: list[Any] = []
        self.res_kinds: list[str] = []
        for i, (kind, cap) in enumerate(model.resources):
            cls = {
                "res": a.Resource,
                "prio": a.PriorityResource,
                "preempt": a.PreemptiveResource,
            }[kind]
            res = cls(env, capacity=cap)
            self.resources.append(res)
            self.res_kinds.append(kind)
            self.label(res, f"R{i}")
        self.containers = []
        for i, (cap, init) in enumerate(model.containers):
            c = a.Container(env, capacity=cap, init=init)
            self.containers.append(c)
            self.label(c, f"C{i}")
        self.stores = []
        self.store_kinds: list[str] = []
        for i, (kind, cap) in enumerate(model.stores):
            cls = {"fifo": a.Store, "filter": a.FilterStore, "prio": a.PriorityStore}[kind]
            s = cls(env, capacity=cap)
            self.stores.append(s)
            self.store_kinds.append(kind)
            self.label(s, f"S{i}")
        self.events: list[Any] = []
        self.event_gen: list[int] = []
        for k in range(model.n_events):
            self.events.append(None)
            self.event_gen.append(-1)
            self.renew(k)

    # -- bookkeeping -------------------------------------------------------------

    def label(self, obj: Any, name: str) -> Any:
        self.labels[id(obj)] = name
        self._keep.append(obj)
        return obj

    def renew(self, k: int) -> None:
        self.event_gen[k] += 1
        self.events[k] = self.label(self.a.event(self.env), f"E{k}.{self.event_gen[k]}")

    def emit(self, pid: int, what: str, value: Any = None) -> None:
        active = self.env.active_process is self.procs[pid]
        # With the state of every shared object at every resume point, a difference in
        # when a grant, put or get happens shows up at the next entry.
        self.log.append((self.env.now, pid, what, value, active, self.snapshot()))

    def snapshot(self) -> tuple[Any, ...]:
        return (
            tuple((r.count, len(r.queue)) for r in self.resources),
            tuple(c.level for c in self.containers),
            tuple(tuple(self.norm(x) for x in s.items) for s in self.stores),
        )

    def spawn(self, ops: list[tuple[Any, ...]]) -> int:
        pid = len(self.procs)
        self.started.append(False)
        self.procs.append(None)
        gen = self.body(pid, ops)
        proc = self.a.spawn(self.env, as_coroutine(gen) if self.use_async else gen)
        self.procs[pid] = proc
        self.pid_of[id(proc)] = pid
        self.label(proc, f"P{pid}")
        return pid

    # -- normalisation -----------------------------------------------------------

    def norm(self, v: Any) -> Any:
        a = self.a
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, a.PriorityItem):
            return ("PI", self.norm(v.priority), self.norm(v.item))
        if isinstance(v, tuple):
            return tuple(self.norm(x) for x in v)
        if isinstance(v, list):
            return [self.norm(x) for x in v]
        if isinstance(v, a.ConditionValue):
            items = [(self.labels.get(id(ev), "?"), self.norm(val)) for ev, val in v.items()]
            return ("CV", items)
        if isinstance(v, a.Preempted):
            by = None if v.by is None else self.pid_of.get(id(v.by), "?")
            return ("PREEMPTED", by, v.usage_since, self.labels.get(id(v.resource), "?"))
        if isinstance(v, BaseException):
            return self.norm_exc(v)
        return ("OBJ", self.labels.get(id(v), type(v).__name__))

    def norm_exc(self, e: BaseException) -> tuple[Any, ...]:
        cause = e.__cause__
        return (
            "EXC",
            type(e).__name__,
            self.norm(tuple(e.args)),
            None if cause is None else (type(cause).__name__, self.norm(tuple(cause.args))),
        )

    def state(self, kind: str, idx: int) -> Any:
        if kind == "res":
            r = self.resources[idx]
            return ("res", r.count, len(r.queue), len(r.users), r.capacity)
        if kind == "cont":
            c = self.containers[idx]
            return ("cont", c.level, c.capacity)
        s = self.stores[idx]
        return ("store", self.norm(list(s.items)))

    # -- the interpreter ---------------------------------------------------------

    def wait(self, pid: int, ev: Any, tag: str) -> Any:
        """Yield *ev*; log the value, the interrupt or the exception. Returns (ok, value)."""
        try:
            v = yield ev
        except self.a.Interrupt as e:
            self.emit(pid, tag + "!int", self.norm(e.cause))
            return False, None
        except Exception as e:
            self.emit(pid, tag + "!exc", self.norm_exc(e))
            return False, None
        self.emit(pid, tag, self.norm(v))
        return True, v

    def build(self, pid: int, tree: tuple[Any, ...], n: list[int]) -> Any:
        """Build a condition tree.

        Nodes: ``("d", delay, value)``, ``("ev", k)``, ``("p", target)`` (a process,
        never self), ``("all"|"any", [children])`` (``all_of``/``any_of``),
        ``("and"|"or", left, right)`` (the ``&``/``|`` operators).
        """
        a, env = self.a, self.env
        kind = tree[0]
        n[0] += 1
        name = f"p{pid}.c{n[0]}"
        if kind == "d":
            return self.label(a.timeout(env, tree[1], tree[2]), name)
        if kind == "ev":
            return self.events[tree[1]]
        if kind == "p":
            t = tree[1] % len(self.procs)
            if t == pid:
                return self.label(a.timeout(env, 0, "self"), name)
            return self.procs[t]
        if kind in ("all", "any"):
            kids = [self.build(pid, x, n) for x in tree[1]]
            ev = a.all_of(env, kids) if kind == "all" else a.any_of(env, kids)
            return self.label(ev, name)
        left = self.build(pid, tree[1], n)
        right = self.build(pid, tree[2], n)
        return self.label(left & right if kind == "and" else left | right, name)

    def body(self, pid: int, ops: list[tuple[Any, ...]]) -> Any:
        a, env = self.a, self.env
        self.started[pid] = True
        self.emit(pid, "start")
        last = None
        n = [0]
        for op in ops:
            kind = op[0]
            if kind == "delay":
                n[0] += 1
                ev = self.label(a.timeout(env, op[1], op[2]), f"p{pid}.d{n[0]}")
                last = ev
                yield from self.wait(pid, ev, "delay")
            elif kind == "sleep":
                # Yielded at once and never held: the kernel may elide the event.
                try:
                    v = yield a.timeout(env, op[1], op[2])
                except a.Interrupt as e:
                    self.emit(pid, "sleep!int", self.norm(e.cause))
                else:
                    self.emit(pid, "sleep", self.norm(v))
            elif kind == "peek":
                # Another process's target, which is an elided delay's event if any.
                t = op[1] % len(self.procs)
                other = self.procs[t]
                if t == pid or not self.started[t] or not other.is_alive:
                    self.emit(pid, "peek-skip", t)
                else:
                    target = other.target
                    self.emit(pid, "peek", (t, target.triggered, target.processed))
                    if op[2]:
                        last = target
            elif kind == "use":
                ev = yield from self.use(pid, op, n)
                if ev is not None:
                    last = ev
            elif kind == "cput":
                ev = self.containers[op[1]].put(op[2])
                yield from self.wait(pid, ev, "cput")
                self.emit(pid, "level", self.containers[op[1]].level)
            elif kind == "cget":
                ev = self.containers[op[1]].get(op[2])
                yield from self.wait(pid, ev, "cget")
                self.emit(pid, "level", self.containers[op[1]].level)
            elif kind == "sput":
                s = op[1]
                item = op[2]
                if self.store_kinds[s] == "prio":
                    item = a.PriorityItem(op[3], item)
                ev = self.stores[s].put(item)
                yield from self.wait(pid, ev, "sput")
            elif kind == "sputs":
                s = op[1]
                for item, prio in op[2]:
                    self.stores[s].put(
                        a.PriorityItem(prio, item) if self.store_kinds[s] == "prio" else item
                    )
                self.emit(pid, "sputs", len(op[2]))
            elif kind == "sget":
                s = op[1]
                if self.store_kinds[s] == "filter" and op[2] != "default":
                    ev = self.stores[s].get(FILTERS[op[2]])
                else:
                    ev = self.stores[s].get()
                yield from self.wait(pid, ev, "sget")
            elif kind == "spawn":
                cpid = self.spawn(op[1])
                self.emit(pid, "spawned", cpid)
                last = self.procs[cpid]
                if op[2]:
                    yield from self.wait(pid, last, "child")
            elif kind == "join":
                t = op[1] % len(self.procs)
                if t == pid:
                    self.emit(pid, "join-self")
                    continue
                last = self.procs[t]
                yield from self.wait(pid, last, f"join{t}")
            elif kind == "interrupt":
                t = op[1] % len(self.procs)
                target = self.procs[t]
                if t == pid:
                    self.emit(pid, "int-skip-self", t)
                elif not target.is_alive:
                    self.emit(pid, "int-skip-dead", t)
                elif not self.started[t] and not op[3]:
                    self.emit(pid, "int-skip-unstarted", t)
                else:
                    target.interrupt(op[2])
                    self.emit(pid, "interrupted", t)
            elif kind == "cond":
                ev = self.build(pid, op[1], n)
                last = ev
                yield from self.wait(pid, ev, "cond")
            elif kind == "succeed":
                ev = self.events[op[1]]
                if ev.triggered:
                    self.emit(pid, "succeed-skip", op[1])
                else:
                    ev.succeed(op[2])
                    self.emit(pid, "succeeded", op[1])
            elif kind == "fail":
                ev = self.events[op[1]]
                if ev.triggered:
                    self.emit(pid, "fail-skip", op[1])
                else:
                    ev.fail(ValueError(op[2]))
                    self.emit(pid, "failed", op[1])
            elif kind == "renew":
                if self.events[op[1]].triggered:
                    self.renew(op[1])
                    self.emit(pid, "renewed", op[1])
            elif kind == "wait":
                last = self.events[op[1]]
                yield from self.wait(pid, last, "wait")
            elif kind == "reyield":
                if last is None:
                    self.emit(pid, "reyield-none")
                else:
                    self.emit(pid, "reyield", (last.triggered, last.processed))
                    yield from self.wait(pid, last, "re")
            elif kind == "observe":
                self.emit(pid, "observe", self.state(op[1], op[2]))
            elif kind == "raise":
                self.emit(pid, "raise", op[1])
                raise ValueError(op[1])
            else:  # pragma: no cover - a bug in the generator
                raise AssertionError(op)
        ret = ("ret", pid)
        self.emit(pid, "finish", ret)
        return ret

    def use(self, pid: int, op: tuple[Any, ...], n: list[int]) -> Any:
        """Run one ``use`` op; return the last event waited on (for ``reyield``)."""
        a, env = self.a, self.env
        _, r, hold, prio, preempt, mode, patience = op
        res = self.resources[r]
        kind = self.res_kinds[r]
        n[0] += 1
        name = f"p{pid}.q{n[0]}"

        def request() -> Any:
            if kind == "res":
                req = res.request()
            elif kind == "prio":
                req = res.request(priority=prio)
            else:
                req = res.request(priority=prio, preempt=preempt)
            return self.label(req, name)

        last = None
        if mode == "manual":
            req = request()
            ok, _ = yield from self.wait(pid, req, "granted")
            if not ok:
                rel = a.cancel_request(res, req)
                yield from self.wait(pid, rel, "cancelled")
                return rel
            ev = self.label(a.timeout(env, hold), name + "h")
            yield from self.wait(pid, ev, "held")
            rel = res.release(req)
            yield from self.wait(pid, rel, "released")
            self.emit(pid, "after", self.state("res", r))
            return rel
        with request() as req:
            if mode == "renege":
                pat = self.label(a.timeout(env, patience, "tired"), name + "p")
                cond = self.label(req | pat, name + "or")
                ok, v = yield from self.wait(pid, cond, "granted?")
                got = ok and req in v
                self.emit(pid, "got", got)
            else:
                got, _ = yield from self.wait(pid, req, "granted")
            if got:
                self.emit(pid, "holding", self.state("res", r))
                ev = self.label(a.timeout(env, hold), name + "h")
                last = ev
                ok, _ = yield from self.wait(pid, ev, "held")
                if ok and mode == "explicit":
                    last = self.label(res.release(req), name + "r")
                    yield from self.wait(pid, last, "released")
        self.emit(pid, "after", self.state("res", r))
        return last


def execute(adapter: Any, model: Model, mode: str = "run", **env_kw: Any) -> Outcome:
    """Run *model* on *adapter*'s kernel.

    *mode*: ``run``, ``step`` (a ``step()`` loop), ``split`` (``run(until=...)`` then
    ``run()``) or ``async`` (``run()`` with every process an ``async def`` coroutine).
    """
    ctx = Ctx(adapter, model, use_async=mode == "async", **env_kw)
    env = ctx.env
    for ops in model.programs:
        ctx.spawn(ops)
    crash = None
    pause = None
    try:
        if mode in ("run", "async"):
            adapter.run(env)
        elif mode == "step":
            while True:
                try:
                    adapter.step(env)
                except adapter.EmptySchedule:
                    break
        elif mode == "split":
            until: Any = model.until
            if until == "P0":
                until = ctx.procs[0]
            elif until == "E0":
                until = ctx.events[0]
            try:
                ret = adapter.run(env, until)
            except Exception as e:
                if not adapter.until_not_triggered(e):
                    raise
                pause = (env.now, "UNTIL-NOT-TRIGGERED", len(ctx.log))
            else:
                pause = (env.now, ctx.norm(ret), len(ctx.log))
                adapter.run(env)
        else:  # pragma: no cover
            raise AssertionError(mode)
    except Exception as e:
        crash = ctx.norm_exc(e)
    final = (
        tuple(
            (p.is_alive, p.triggered, p.processed)
            + ((p.ok, ctx.norm(p.value)) if p.triggered else ())
            for p in ctx.procs
        ),
        env.active_process is None,
        tuple(ctx.state("res", i) for i in range(len(ctx.resources))),
        tuple(ctx.state("cont", i) for i in range(len(ctx.containers))),
        tuple(ctx.state("store", i) for i in range(len(ctx.stores))),
        tuple((e.triggered, e.processed) for e in ctx.events),
    )
    return Outcome(ctx.log, env.now, crash, final, pause)


# --------------------------------------------------------------------------- strategy

DELAYS = (0, 1, 2, 0, 1, 0.5, 3)


def chance(odds: int) -> st.SearchStrategy[bool]:
    """True with probability about ``1 / odds`` (shrinks to False)."""
    return st.sampled_from((False,) * (odds - 1) + (True,))


VALUES = (None, "a", "b", 7)


@st.composite
def cond_trees(draw: Any, depth: int, n_events: int) -> tuple[Any, ...]:
    """A condition tree of delays, shared events and processes."""
    leaf = st.one_of(
        st.tuples(st.just("d"), st.sampled_from(DELAYS), st.sampled_from(VALUES)),
        st.tuples(st.just("ev"), st.integers(0, n_events - 1)),
        st.tuples(st.just("p"), st.integers(0, 7)),
    )
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        return draw(leaf)
    kind = draw(st.sampled_from(("all", "any", "and", "or")))
    if kind in ("all", "any"):
        kids = draw(st.lists(cond_trees(depth + 1, n_events), min_size=0, max_size=3))
        return (kind, kids)
    return (kind, draw(cond_trees(depth + 1, n_events)), draw(cond_trees(depth + 1, n_events)))


@st.composite
def programs(
    draw: Any, depth: int, shape: dict[str, Any], raise_odds: int = 30, max_ops: int = 6
) -> list[tuple[Any, ...]]:
    """A process program: a list of ops (see the module docstring).

    It ends with a ``raise`` with probability ``1 / raise_odds``.
    """
    kinds = ["delay"] * 4 + ["sleep"] * 3 + ["peek"] + ["cond"] * 2
    kinds += ["join", "reyield", "wait", "wait"]
    kinds += ["interrupt", "interrupt"]
    kinds += ["succeed", "succeed", "fail", "renew"]
    if shape["resources"]:
        kinds += ["use"] * 4
    if shape["resources"] or shape["containers"] or shape["stores"]:
        kinds += ["observe"]
    if shape["containers"]:
        kinds += ["cput", "cget", "cget"]
    if shape["stores"]:
        kinds += ["sput", "sputs", "sget", "sget", "sget"]
    if depth < 2:
        kinds += ["spawn", "spawn"]
    # sampled_from draws uniformly; integers() would favour tiny programs.
    n_ops = draw(st.sampled_from(range(max_ops + 1 if depth == 0 else (max_ops + 1) // 2 + 2)))
    ops: list[tuple[Any, ...]] = []
    for _ in range(n_ops):
        kind = draw(st.sampled_from(kinds))
        if kind == "delay":
            ops.append(("delay", draw(st.sampled_from(DELAYS)), draw(st.sampled_from(VALUES))))
        elif kind == "sleep":
            value = draw(st.sampled_from((None, None, None, "v")))
            ops.append(("sleep", draw(st.sampled_from(DELAYS)), value))
        elif kind == "peek":
            ops.append(("peek", draw(st.integers(0, 7)), draw(st.booleans())))
        elif kind == "use":
            r = draw(st.integers(0, len(shape["resources"]) - 1))
            ops.append(
                (
                    "use",
                    r,
                    draw(st.sampled_from(DELAYS)),
                    draw(st.sampled_from((0, 1, 1, 2))),
                    draw(st.booleans()),
                    draw(st.sampled_from(("with", "with", "explicit", "manual", "renege"))),
                    draw(st.sampled_from(DELAYS)),
                )
            )
        elif kind == "observe":
            what = draw(st.sampled_from([k for k in ("res", "cont", "store") if shape[k]]))
            ops.append(("observe", what, draw(st.integers(0, len(shape[what]) - 1))))
        elif kind in ("cput", "cget"):
            c = draw(st.integers(0, len(shape["containers"]) - 1))
            cap = shape["containers"][c][0]
            top = 3 if cap == INF else int(cap)
            ops.append((kind, c, draw(st.integers(1, top))))
        elif kind == "sput":
            s = draw(st.integers(0, len(shape["stores"]) - 1))
            ops.append(("sput", s, draw(st.integers(0, 9)), draw(st.sampled_from((0, 1, 1, 2)))))
        elif kind == "sputs":
            s = draw(st.integers(0, len(shape["stores"]) - 1))
            burst = st.tuples(st.integers(0, 9), st.sampled_from((0, 1, 1, 2)))
            ops.append(("sputs", s, draw(st.lists(burst, min_size=2, max_size=4))))
        elif kind == "sget":
            s = draw(st.integers(0, len(shape["stores"]) - 1))
            ops.append(("sget", s, draw(st.sampled_from(("default", *FILTERS)))))
        elif kind == "spawn":
            wait = draw(st.booleans())
            child = draw(programs(depth + 1, shape, 4 if wait else 30, max_ops))
            ops.append(("spawn", child, wait))
        elif kind == "join":
            ops.append(("join", draw(st.integers(0, 7))))
        elif kind == "interrupt":
            ops.append(
                (
                    "interrupt",
                    draw(st.integers(0, 7)),
                    draw(st.sampled_from((None, "why", 3))),
                    draw(chance(6)),
                )
            )
        elif kind == "cond":
            ops.append(("cond", draw(cond_trees(0, shape["n_events"]))))
        elif kind in ("succeed", "fail", "renew", "wait"):
            k = draw(st.integers(0, shape["n_events"] - 1))
            if kind == "succeed":
                ops.append(("succeed", k, draw(st.sampled_from(VALUES))))
            elif kind == "fail":
                # Half the time only: a failure nobody waits for ends the whole run.
                if draw(chance(2)):
                    ops.append(("fail", k, f"boom{k}"))
                else:
                    ops.append(("wait", k))
            else:
                ops.append((kind, k))
        else:
            ops.append((kind,))
    if draw(chance(raise_odds)):
        ops.append(("raise", f"err{depth}"))
    return ops


@st.composite
def models(draw: Any, max_programs: int = 5, max_ops: int = 6) -> Model:
    """A random model: shared objects plus 1 to *max_programs* top-level programs."""
    resource = st.tuples(st.sampled_from(("res", "prio", "preempt")), st.sampled_from((1, 2, 3)))
    container = st.sampled_from(((INF, 0), (3, 0), (3, 2), (5, 5), (2, 1)))
    store = st.tuples(st.sampled_from(("fifo", "filter", "prio")), st.sampled_from((INF, 1, 2)))
    resources = [draw(resource) for _ in range(draw(st.sampled_from((0, 1, 1, 2))))]
    containers = [draw(container) for _ in range(draw(st.sampled_from((0, 0, 1))))]
    stores = [draw(store) for _ in range(draw(st.sampled_from((0, 1, 1, 2))))]
    n_events = draw(st.integers(1, 2))
    shape = {
        "resources": resources,
        "containers": containers,
        "stores": stores,
        "res": resources,
        "cont": containers,
        "store": stores,
        "n_events": n_events,
    }
    n_programs = draw(st.sampled_from(range(1, max_programs + 1)))
    progs = [draw(programs(0, shape, 30, max_ops)) for _ in range(n_programs)]
    until = draw(st.sampled_from((None, None, 0.5, 1, 2, 3.5, "P0", "E0")))
    return Model(resources, containers, stores, n_events, progs, until)
