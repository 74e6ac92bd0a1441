"""AgentMemory: a prompt memory held to a token budget by a declared, deterministic policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra
from simulacra import ConfigError
from simulacra.agents import MEMORY_POLICIES, MIN_ENTRY_TOKENS, AgentMemory, min_memory_tokens
from simulacra.llm import approx_tokens

WORDS = st.text(alphabet="abcdefgh@#:.", min_size=1, max_size=9)
TEXTS = st.lists(WORDS, min_size=0, max_size=40).map(" ".join)
ENTRIES = st.lists(st.tuples(TEXTS, st.sampled_from(["saw", "posted", "liked", "x y"]),
                             st.one_of(st.none(), st.integers(0, 50))), max_size=60)


def _budget(policy: str) -> st.SearchStrategy[int]:
    return st.integers(min_memory_tokens(policy), 400)


def _fill(memory: AgentMemory, entries: list[tuple[str, str, int | None]]) -> AgentMemory:
    for text, kind, step in entries:
        memory.add(text, kind=kind, step=step)
    return memory


@settings(max_examples=300, deadline=None)
@given(entries=ENTRIES, policy=st.sampled_from(MEMORY_POLICIES), data=st.data())
def test_the_memory_never_exceeds_its_budget_and_keeps_the_newest_entries(
        entries: list[tuple[str, str, int | None]], policy: str, data: st.DataObject) -> None:
    budget = data.draw(_budget(policy))
    memory = AgentMemory(budget, policy)
    added: list[str] = []
    stored: list[str] = []  # each entry as the memory took it in (cut if too big)
    for text, kind, step in entries:
        memory.add(text, kind=kind, step=step)
        added.append(" ".join(text.split()))
        lines = memory.lines()
        # within the budget, counted per line, and so also as one text
        assert memory.tokens == sum(approx_tokens(line) for line in lines) <= budget
        assert approx_tokens("\n".join(lines)) <= budget
        kept = [line for _, _, line in memory.entries()]
        # the newest entry is always there (cut to fit when it is too big on its own)
        assert kept, "the newest entry was dropped"
        newest = added[-1]
        assert kept[-1] == newest or (kept[-1].endswith("\u2026")
                                      and newest.startswith(kept[-1][:-1]))
        stored.append(kept[-1])
        # the others are the entries just before it, in order: the newest ones
        assert kept == stored[len(stored) - len(kept):]
        assert memory.dropped == len(added) - len(kept)
        if policy == "drop_oldest":
            assert len(lines) == len(kept)  # no summary line
            if memory.dropped:  # dropping stopped as soon as the rest fitted
                previous = stored[len(stored) - len(kept) - 1]
                assert memory.tokens + approx_tokens(previous) > budget
        elif memory.dropped:
            assert lines[0].startswith(f"earlier: {memory.dropped} entr")


@settings(max_examples=200, deadline=None)
@given(entries=ENTRIES, policy=st.sampled_from(MEMORY_POLICIES), cut=st.integers(0, 60),
       data=st.data())
def test_the_memory_is_a_pure_function_of_its_entries_and_survives_a_checkpoint(
        entries: list[tuple[str, str, int | None]], policy: str, cut: int,
        data: st.DataObject) -> None:
    budget = data.draw(st.one_of(st.none(), _budget(policy)))
    one = _fill(AgentMemory(budget, policy), entries)
    two = _fill(AgentMemory(budget, policy), entries)
    assert one.get_state() == two.get_state()
    assert one.lines() == two.lines()

    # cut anywhere, restored from plain data into a fresh memory, continued: the same
    cut = min(cut, len(entries))
    first = _fill(AgentMemory(budget, policy), entries[:cut])
    state = first.get_state()
    restored = AgentMemory(budget, policy)
    restored.set_state(state)
    assert restored.lines() == first.lines()
    _fill(restored, entries[cut:])
    assert restored.get_state() == one.get_state()
    assert restored.lines() == one.lines()
    assert restored.tokens == one.tokens


def test_without_a_budget_every_entry_is_kept() -> None:
    memory = AgentMemory()
    for i in range(500):
        memory.add(f"step {i}: saw #{i} @bob: a post about bread and chess", kind="saw", step=i)
    assert len(memory) == 500
    assert memory.dropped == 0
    assert memory.tokens == 500 * approx_tokens("step 0: saw #0 @bob: a post about bread and chess")


def test_summarise_folds_counts_steps_and_the_last_entry_into_one_line() -> None:
    memory = AgentMemory(40, "summarise")
    memory.add("step 1: saw #1 @bob: hello", kind="saw", step=1)
    memory.add("step 1: I liked #1", kind="liked", step=1)
    memory.add("step 2: saw #2 @cleo: hi all, what is new with everyone here today", kind="saw",
               step=2)
    memory.add("step 3: I posted: bread is great and chess is greater still, I say", kind="posted",
               step=3)
    lines = memory.lines()
    assert lines[0].startswith("earlier: 3 entries folded, steps 1-2 (liked 1, saw 2); last: ")
    assert lines[-1] == "step 3: I posted: bread is great and chess is greater still, I say"
    assert memory.tokens <= 40
    assert memory.render().splitlines() == ["MEMORY:", *lines]
    assert AgentMemory(40, "summarise").render() == ""
    assert AgentMemory(40, "summarize").policy == "summarise"


def test_an_entry_too_big_for_the_budget_is_cut_to_fit() -> None:
    memory = AgentMemory(MIN_ENTRY_TOKENS)
    memory.add("word " * 100)
    (line,) = memory.lines()
    assert line.endswith("\u2026")
    assert approx_tokens(line) <= MIN_ENTRY_TOKENS


@pytest.mark.parametrize(("budget", "policy"), [
    (0, "drop_oldest"), (-5, "drop_oldest"), (MIN_ENTRY_TOKENS - 1, "drop_oldest"),
    (min_memory_tokens("summarise") - 1, "summarise"), (True, "drop_oldest"),
    (20.5, "drop_oldest"), ("300", "drop_oldest")])
def test_a_budget_below_one_observation_is_refused(budget: object, policy: str) -> None:
    with pytest.raises(ConfigError, match=f"at least {min_memory_tokens(policy)}.*got"):
        AgentMemory(budget, policy)  # type: ignore[arg-type]


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ConfigError, match="drop_oldest, summarise, got 'forget'"):
        AgentMemory(100, "forget")


def test_the_memory_is_at_the_front_door() -> None:
    assert simulacra.AgentMemory is AgentMemory
    assert "AgentMemory" in simulacra.__all__
    assert min_memory_tokens("drop_oldest") == MIN_ENTRY_TOKENS
    assert min_memory_tokens("summarise") == 2 * MIN_ENTRY_TOKENS
