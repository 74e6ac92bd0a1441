"""Early starts (``World.affected_by``): the same run, calls started sooner, lies caught.

A board world of our own: each agent sees the posts of the agents it watches,
and mentions (wakes) only agents that watch it. The event-driven engine with
``dependencies=True`` starts a turn before the kernel reaches it when no agent
the world names can act first; the run must equal the one without (and the
sequential one), whatever the graph, the wall-clock speed of each call and the
wake-up times (Hypothesis). A world that names too few agents is stopped with
one clear error, never a different run.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, EventEngine, LatencyModel, World
from simulacra.agents import ActionSpec, AgentId

LATENCY = LatencyModel(base=0.5, min_duration=0.5)  # every turn takes 0.5 of virtual time


class Board(World):
    """Posts on a board; agent X sees the last posts of the agents X watches."""

    PLAIN_STATE = True

    def __init__(self, watches: Mapping[str, Sequence[str]],
                 declared: Mapping[str, Sequence[str] | None] | None) -> None:
        super().__init__()
        self.watches = {k: sorted(v) for k, v in watches.items()}
        self.posts: list[list[str]] = []
        self._declared = declared

    _NOT_STATE = World._NOT_STATE | {"_declared"}

    def affected_by(self, agent_id: AgentId) -> Sequence[str] | None:
        return None if self._declared is None else self._declared[str(agent_id)]

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> tuple[Any, ...]:
        watched = set(self.watches[str(agent_id)])
        seen = [(i, a, t) for i, (a, t) in enumerate(self.posts) if a in watched]
        return tuple(seen[-4:])

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        text, mentions = action
        return [("post", {"text": text, "mentions": list(mentions)}, tuple(mentions))]

    def apply(self, event: Any) -> None:
        super().apply(event)
        self.posts.append([event.agent, event.data["text"]])


class Poster:
    """Posts a digest of what it saw; mentions some of its watchers; sleeps as told (wall)."""

    def __init__(self, name: str, watchers: Sequence[str], *, sleeps: Sequence[float],
                 pauses: Sequence[float], mentions: bool) -> None:
        self.id = name
        self.watchers = list(watchers)
        self.sleeps = list(sleeps)
        self.pauses = list(pauses)
        self.mentions = mentions
        self.seen: Any = None
        self.turns = 0
        self.mention_from = 0  # the first turn that mentions

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        time.sleep(self.sleeps[spec.step % len(self.sleeps)])
        digest = hashlib.sha256(repr((self.id, spec.step, self.seen)).encode()).hexdigest()[:8]
        self.turns += 1
        picked: tuple[str, ...] = ()
        if self.mentions and self.watchers and spec.step >= self.mention_from:
            picked = (self.watchers[int(digest, 16) % len(self.watchers)],)
        return f"{self.id}/{spec.step}/{digest}", picked

    def next_wake(self, now: float, rng: Any) -> float:
        return now + self.pauses[self.turns % len(self.pauses)]

    def get_state(self) -> dict[str, Any]:
        return {"turns": self.turns, "seen": repr(self.seen)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.turns = state["turns"]


def society(watches: Mapping[str, Sequence[str]], *,
            declared: Mapping[str, Sequence[str] | None] | None,
            sleeps: Mapping[str, Sequence[float]], pauses: Mapping[str, Sequence[float]],
            mentions: bool = True) -> tuple[Board, list[Poster]]:
    watchers = {name: sorted(o for o, seen in watches.items() if name in seen) for name in watches}
    agents = [Poster(name, watchers[name], sleeps=sleeps[name], pauses=pauses[name],
                     mentions=mentions) for name in sorted(watches)]
    return Board(watches, declared), agents


def run(world: Board, agents: list[Poster], *, mode: str = "threads", dependencies: bool = True,
        turns: int = 3, reaction: float = 0.0) -> tuple[str, EventEngine]:
    engine = EventEngine(world, agents, latency=LATENCY, mode=mode, concurrency=8,
                         dependencies=dependencies, wake_interval=1e-6, reaction_delay=reaction)
    return engine.run(max_turns=turns).digest, engine


NAMES = ("ann", "bob", "cy", "dee", "eve", "fox")


@st.composite
def boards(draw: st.DrawFn) -> dict[str, Any]:
    names = NAMES[:draw(st.integers(2, len(NAMES)))]
    watches = {n: draw(st.lists(st.sampled_from([o for o in names if o != n]), unique=True,
                                max_size=3)) for n in names}
    # An agent mentions only its watchers, so X is seen by and woken by those X watches:
    # watches[X] is the truth; sometimes more is declared (a superset is safe).
    declared: dict[str, list[str] | None] = {
        n: sorted(set(watches[n]) | set(draw(st.lists(st.sampled_from(names), max_size=2))))
        for n in names}
    for n in draw(st.lists(st.sampled_from(names), unique=True, max_size=2)):
        declared[n] = None  # "anyone may": the engine takes every other agent
    sleeps = {n: draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.004, 0.02]), min_size=1,
                               max_size=3)) for n in names}
    # Long pauses leave agents idle, to be woken by a mention before their own time.
    pauses = {n: draw(st.lists(st.sampled_from([0.1, 0.3, 0.6, 1.0, 2.5, 6.0]), min_size=1,
                               max_size=3)) for n in names}
    return {"watches": watches, "declared": declared, "sleeps": sleeps, "pauses": pauses,
            "mentions": draw(st.sampled_from([True, True, False]))}


REACTIONS = st.sampled_from([0.0, 0.0, 0.05, 0.3, 0.7])


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(board=boards(), mode=st.sampled_from(["threads", "asyncio"]), reaction=REACTIONS)
def test_early_starts_change_nothing_but_the_wall_clock(board: dict[str, Any], mode: str,
                                                       reaction: float) -> None:
    reference, _ = run(*society(**board), mode="sequential", turns=4, reaction=reaction)
    without, _ = run(*society(**board), mode=mode, dependencies=False, turns=4,
                     reaction=reaction)
    early, _ = run(*society(**board), mode=mode, turns=4, reaction=reaction)
    assert early == without == reference


@settings(max_examples=60, deadline=None)
@given(board=boards(), reaction=REACTIONS, data=st.data())
def test_a_world_that_names_too_few_stops_or_runs_right_never_wrong(
        board: dict[str, Any], reaction: float, data: st.DataObject) -> None:
    """Leave some true neighbours out: a ConfigError, or the sequential digest; nothing else."""
    declared = {name: data.draw(st.lists(st.sampled_from(seen), unique=True,
                                         max_size=max(len(seen) - 1, 0)))
                if seen else [] for name, seen in board["watches"].items()}
    reference, _ = run(*society(**board), mode="sequential", turns=4, reaction=reaction)
    try:
        early, _ = run(*society(**dict(board, declared=declared)), turns=4, reaction=reaction)
    except ConfigError as error:
        stopped = str(error)
    else:
        assert early == reference
        return
    assert "affected_by" in stopped


def _three(declared_for_bob: list[str], *, mentions: bool = False) -> tuple[Board, list[Poster]]:
    """ann's second call is slow (wall); cy posts at 1.8; bob watches cy and wakes at 2.0.

    Every turn takes 0.5 and the first ones start at about 0. While the kernel
    waits for ann's second call (woken at 1.1, its harvest at 1.6), bob's
    wake-up at 2.0 may start early only if no agent the world names for bob can
    act first: cy, woken at 1.3, resolves at 1.8. dee (2.1) is nobody's.
    """
    watches = {"ann": [], "bob": ["cy"], "cy": [], "dee": []}
    declared = {"ann": [], "bob": declared_for_bob, "cy": [], "dee": []}
    sleeps = {"ann": [0.0, 0.4], "bob": [0.0], "cy": [0.0], "dee": [0.0]}
    pauses = {"ann": [0.6], "bob": [1.5], "cy": [0.8], "dee": [1.6]}
    world, agents = society(watches, declared=declared, sleeps=sleeps, pauses=pauses,
                            mentions=mentions)
    if mentions:  # cy mentions bob in its second turn: bob is woken by cy at 1.8
        agents[2].watchers = ["bob"]
        agents[2].mention_from = 1
    return world, agents


def test_a_true_declaration_starts_the_turns_it_can() -> None:
    world, agents = _three(["cy"])
    digest, engine = run(world, agents, turns=2)
    assert engine.early_starts >= 1  # dee, which nobody affects, waits for no one
    assert digest == run(*_three(["cy"]), mode="sequential", turns=2)[0]


def test_an_observation_the_world_did_not_declare_stops_the_run() -> None:
    world, agents = _three([])  # bob watches cy, but the world says nobody affects bob
    with pytest.raises(ConfigError, match=r"agent 'bob' sees another world at t=2 than "
                                          r"when its turn started early: Board\.affected_by"
                                          r"\('bob'\) leaves out an agent whose actions it "
                                          r"observes \(of those resolved since it started "
                                          r"and not named: .*'cy'"):
        run(world, agents, turns=2)


def test_a_wake_up_the_world_did_not_declare_stops_the_run() -> None:
    world, agents = _three([], mentions=True)
    with pytest.raises(ConfigError, match=r"agent 'cy' woke agent 'bob' \(for t=1\.8\).*"
                                          r"Board\.affected_by\('bob'\) does not name 'cy'"):
        run(world, agents, turns=2)


@pytest.mark.parametrize(("answer", "words"), [
    ("cy", r"must return None or a collection of agent ids, got str 'cy'"),
    (["zed"], r"names 'zed', which is not an agent of this run"),
    (3, r"must return None or a collection of agent ids, got int 3"),
])
def test_a_bad_declaration_is_one_clear_error(answer: Any, words: str) -> None:
    world, agents = _three(["cy"])
    world._declared = {"ann": [], "bob": answer, "cy": [], "dee": []}  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=words):
        run(world, agents, turns=2)


def test_a_world_that_names_nobody_runs_as_before() -> None:
    world, agents = _three(["cy"])
    world._declared = None
    digest, engine = run(world, agents, turns=2)
    assert engine.early_starts == 0
    assert digest == run(*_three(["cy"]), mode="sequential", turns=2)[0]


def test_an_agent_answered_none_holds_back_only_itself() -> None:
    """ann answers None ("anyone may"): dee, which nobody affects, still starts early."""
    world, agents = _three(["cy"])
    assert world._declared is not None
    world._declared = {**world._declared, "ann": None}
    digest, engine = run(world, agents, turns=2)
    assert engine.early_starts >= 1
    assert digest == run(*_three(["cy"]), mode="sequential", turns=2)[0]


def _chain() -> tuple[Board, list[Poster]]:
    """bob watches cy, who sleeps long but is woken by dan's mention: a chain of two.

    ann's second call is slow (woken at 1.1, its harvest at 1.6). dan, woken
    at 1.1, mentions cy, which wakes at 1.6 though its own wake-up is at 5.5,
    and posts at 2.1; bob wakes at 2.3. While the kernel waits for ann, bob's
    turn must not start: cy can act before 2.3 through dan.
    """
    watches = {"ann": [], "bob": ["cy"], "cy": ["dan"], "dan": []}
    sleeps = {"ann": [0.0, 0.4], "bob": [0.0], "cy": [0.0], "dan": [0.0]}
    pauses = {"ann": [0.6], "bob": [1.8], "cy": [5.0], "dan": [0.6]}
    world, agents = society(watches, declared=watches, sleeps=sleeps, pauses=pauses)
    agents[2].mentions = False  # cy mentions nobody
    agents[3].mention_from = 1  # dan mentions cy in its second turn only
    return world, agents


def test_a_mention_chain_holds_back_an_early_start() -> None:
    digest, _ = run(*_chain(), turns=2)
    assert digest == run(*_chain(), mode="sequential", turns=2)[0]


def test_a_later_wake_up_from_an_agent_not_named_stops_the_run_too() -> None:
    """cy's mention wakes bob after bob's early turn's time: it would fold into that turn."""
    world, agents = _three([], mentions=True)
    with pytest.raises(ConfigError, match=r"agent 'cy' woke agent 'bob' \(for t=2\.5\) "
                                          r"before the kernel reached the turn 'bob' started "
                                          r"early for t=2"):
        run(world, agents, turns=2, reaction=0.7)


class Opaque:
    """An observation with no __eq__ (compared by identity), and one that will not pickle."""

    def __init__(self, posts: Any, lock: Any = None) -> None:
        self.posts = posts
        self.lock = lock

    def __repr__(self) -> str:  # what the agent writes down: the content, not the address
        return f"Opaque({self.posts!r})"


@pytest.mark.parametrize("shape", ["opaque", "nan", "numpy"])
def test_observations_that_do_not_compare_by_value_are_compared_by_pickle(shape: str) -> None:
    import numpy as np

    class Odd(Board):
        def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
            seen = super().observation_for(agent_id, snapshot)
            if shape == "opaque":
                return Opaque(seen)
            if shape == "nan":
                return (float("nan"), seen)
            return np.array([len(seen), len(self.posts)]) if agent_id == "" else np.array(
                [hash(repr(seen)) % 1000])

    def board() -> tuple[Board, list[Poster]]:
        world, agents = _three(["cy"])
        odd = Odd(world.watches, {"ann": [], "bob": ["cy"], "cy": [], "dee": []})
        return odd, agents

    digest, engine = run(*board(), turns=2)
    assert engine.early_starts >= 1
    assert digest == run(*board(), mode="sequential", turns=2)[0]


def test_an_observation_that_will_not_pickle_is_never_started_early() -> None:
    import threading

    class Locked(Board):
        def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
            return Opaque(super().observation_for(agent_id, snapshot), threading.Lock())

    def board() -> tuple[Board, list[Poster]]:
        world, agents = _three(["cy"])
        return Locked(world.watches, {"ann": [], "bob": ["cy"], "cy": [], "dee": []}), agents

    digest, engine = run(*board(), turns=2)
    assert engine.early_starts == 0  # it could not be checked at its own time
    assert digest == run(*board(), mode="sequential", turns=2)[0]


@pytest.mark.parametrize("style", ["negative zero", "int or float", "set order"])
def test_values_that_are_equal_but_tell_apart_are_a_change(style: str) -> None:
    """0.0 and -0.0, 1 and 1.0 and True, equal frozensets in another order: an agent tells."""

    class Subtle(Board):
        def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
            n = sum(1 for author, _ in self.posts if author in self.watches[str(agent_id)])
            if style == "negative zero":
                return (-0.0 if n % 2 else 0.0,)
            if style == "int or float":
                return ((1, 1.0, True)[n % 3],)
            return (frozenset([8, 16]) if n % 2 else frozenset([16, 8]),)

    world, agents = _three([])  # a lie: bob watches cy
    subtle = Subtle(world.watches, {"ann": [], "bob": [], "cy": [], "dee": []})
    with pytest.raises(ConfigError, match=r"agent '\w+' sees another world at t="):
        run(subtle, agents, turns=2)


def test_a_world_that_hands_out_its_own_list_is_still_checked() -> None:
    """The observation is the world's live list: the check compares a copy taken at the start."""

    class Live(Board):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.seen_by: dict[str, list[Any]] = {}

        def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
            live = self.seen_by.setdefault(str(agent_id), [])
            live[:] = super().observation_for(agent_id, snapshot)  # the same list, refilled
            return live

        _NOT_STATE = Board._NOT_STATE | {"seen_by"}

    world, agents = _three([])  # a lie: bob watches cy
    live = Live(world.watches, {"ann": [], "bob": [], "cy": [], "dee": []})
    with pytest.raises(ConfigError, match=r"agent 'bob' sees another world at t=2 "):
        run(live, agents, turns=2)
