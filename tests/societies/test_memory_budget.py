"""Bounded memory in the social demo: ``sim.agents_memory`` keeps every prompt within its budget.

The agents remember what they saw and did in a ``MEMORY:`` section of their
prompt, held to ``sim.agents_memory.max_tokens`` (docs/social.md, "Bounded
memory"). Nothing here pins a digest: runs are compared with each other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra.errors import ConfigError
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    ScriptedModel,
    approx_tokens,
    social_prompt,
)
from simulacra.societies import (
    build_society,
    load_config,
    replay_run,
    resume_society,
    run_society,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
HEADER = "MEMORY:"


class Spy:
    """The scripted model, keeping every request's prompt (calls come from one thread here)."""

    def __init__(self, seed: int = 0) -> None:
        self.inner = ScriptedModel(seed=seed)
        self.prompts: list[tuple[CallSite | None, str]] = []

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        self.prompts.append((site, request.prompt))
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def _split(prompt: str) -> tuple[list[str], str]:
    """The MEMORY section's lines, and the prompt without it."""
    lines = prompt.split("\n")
    if len(lines) < 2 or lines[1] != HEADER:
        return [], prompt
    end = next(i for i, line in enumerate(lines) if line.startswith("AGENTS:"))
    return lines[2:end], "\n".join([lines[0], *lines[end:]])


def _prompts(steps: int, agents: int, *overrides: str) -> list[str]:
    config = load_config(CONFIG, [f"sim.steps={steps}", f"sim.agents={agents}",
                                  "sim.engine.mode=sequential", *overrides])
    spy = Spy()
    run_society(config, model=spy, write=False)
    assert len(spy.prompts) == steps * agents
    return [prompt for _, prompt in spy.prompts]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["drop_oldest", "summarise"])
def test_over_500_steps_the_prompt_stays_flat_once_the_budget_is_reached(policy: str) -> None:
    budget, agents, steps = 200, 3, 500
    prompts = _prompts(steps, agents, f"sim.agents_memory.max_tokens={budget}",
                       f"sim.agents_memory.policy={policy}")
    memory = [sum(approx_tokens(line) for line in _split(p)[0]) for p in prompts]
    rest = [approx_tokens(_split(p)[1]) for p in prompts]
    whole = [approx_tokens(p) for p in prompts]

    # every prompt: within the budget, plus the parts the memory does not touch
    assert max(memory) <= budget
    for tokens, fixed in zip(whole, rest, strict=True):
        assert tokens <= fixed + budget + approx_tokens(HEADER)
    # the budget is reached early and the memory stays near it, not above, to the end
    reached = next(i for i, m in enumerate(memory) if m > budget * 3 // 4)
    assert reached < 30 * agents
    late = memory[reached:]
    assert min(late[agents:]) > budget // 3
    assert max(whole[reached:]) <= max(rest) + budget + approx_tokens(HEADER)
    first_half, second_half = whole[reached:steps * agents // 2], whole[steps * agents // 2:]
    assert max(second_half) <= max(rest) + budget + approx_tokens(HEADER)
    assert abs(sum(second_half) / len(second_half) - sum(first_half) / len(first_half)) < 40
    if policy == "summarise":
        assert all(_split(p)[0][0].startswith("earlier: ") for p in prompts[reached + agents:])

    # without the budget (one too big to reach) the same memory grows with the run
    unbounded = _prompts(steps, agents, "sim.agents_memory.max_tokens=100000000",
                         f"sim.agents_memory.policy={policy}")
    grown = [sum(approx_tokens(line) for line in _split(p)[0]) for p in unbounded]
    assert grown[-1] > 20 * budget
    assert sum(grown[-100:]) > 1.8 * sum(grown[len(grown) // 2 - 100:len(grown) // 2])


def test_without_a_budget_the_prompt_has_no_memory_and_the_config_is_unchanged() -> None:
    prompts = _prompts(6, 3)
    assert all(HEADER not in p for p in prompts)
    config = load_config(CONFIG, ["sim.agents_memory.policy=summarise"])
    assert "agents_memory" not in config.data["sim"]
    assert "agents_memory" not in config.data["sim"]["world"]
    _, agents = build_society(config)
    assert all("memory" not in agent.get_state() for agent in agents)

    budgeted = load_config(CONFIG, ["sim.agents_memory.max_tokens=64"])
    assert budgeted.data["sim"]["agents_memory"] == {"max_tokens": 64, "policy": "drop_oldest"}
    assert "agents_memory" not in budgeted.data["sim"]["world"]
    _, agents = build_society(budgeted)
    assert all("memory" in agent.get_state() for agent in agents)
    assert budgeted.with_overrides(["run.record=false"]).data["sim"] == budgeted.data["sim"]


MODES = [(engine, mode) for engine in ("round", "async_event")
         for mode in ("sequential", "threads", "asyncio")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["drop_oldest", "summarise"])
def test_with_a_budget_the_digest_is_the_same_in_every_mode(tmp_path: Path, policy: str) -> None:
    memory = ["sim.agents_memory.max_tokens=80", f"sim.agents_memory.policy={policy}"]
    base = ["sim.steps=12", "sim.agents=8", "sim.engine.concurrency=4"]
    digests: dict[str, set[str]] = {"round": set(), "async_event": set()}
    for engine, mode in MODES:
        config = load_config(CONFIG, [*base, *memory, f"sim.engine.step.built_in={engine}",
                                      f"sim.engine.mode={mode}"])
        digests[engine].add(run_society(config, write=False).digest)
    assert [len(found) for found in digests.values()] == [1, 1], digests

    # the memory is in the run: without it (or with another budget) the digest differs
    for engine, found in digests.items():
        plain = run_society(load_config(CONFIG, [*base, f"sim.engine.step.built_in={engine}"]),
                            write=False).digest
        other = run_society(load_config(CONFIG, [*base, "sim.agents_memory.max_tokens=200",
                                                 f"sim.agents_memory.policy={policy}",
                                                 f"sim.engine.step.built_in={engine}"]),
                            write=False).digest
        assert len({plain, other, *found}) == 3

    # and the run directory replays, on another mode, with no model call
    config = load_config(CONFIG, [*base, *memory, "sim.engine.mode=threads"])
    run_society(config, out=tmp_path / "run")
    report = replay_run(tmp_path / "run", overrides=("sim.engine.mode=asyncio",))
    assert report.matches
    assert report.model_calls == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["round", "async_event"])
@pytest.mark.parametrize("checkpoint", [2, 6])
def test_resumed_from_a_checkpoint_with_memory_the_uncut_run(tmp_path: Path, engine: str,
                                                             checkpoint: int) -> None:
    from simulacra.societies._checkpoint import read_checkpoint

    config = load_config(CONFIG, ["sim.steps=10", "sim.agents=6", "sim.engine.concurrency=3",
                                  f"sim.engine.step.built_in={engine}",
                                  "sim.agents_memory.max_tokens=70",
                                  "sim.agents_memory.policy=summarise",
                                  "run.checkpoint_every=2"])
    whole = run_society(config, out=tmp_path / "whole")
    name = f"checkpoint-{checkpoint:06d}.ckpt"
    stored = read_checkpoint(tmp_path / "whole" / "checkpoints" / name, engine)["engine"]
    states = stored["agents"] if engine == "round" else stored["engine"]["agents"]
    assert states, "no agent in the checkpoint"
    assert all("memory" in state for state in states.values())
    assert any(state["memory"]["entries"] for state in states.values())

    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "whole", cut)
    for name in ("digest.txt", "summary.json"):
        (cut / name).unlink()
    resumed = resume_society(cut, from_checkpoint=checkpoint)
    assert resumed.digest == whole.digest
    assert ((cut / "action_events.jsonl").read_bytes()
            == (tmp_path / "whole" / "action_events.jsonl").read_bytes())


def test_the_scripted_model_reads_around_the_memory_section() -> None:
    """Memory lines that quote posts never become feed posts, mentions or handles to it."""
    feed = [(3, "bob", "sourdough anyone? @alice", None), (4, "carol", "chess at 5", None)]
    plain = social_prompt("alice", persona="baker", interests=("bread",), agents=("bob", "carol"),
                          feed=feed, mentions=(3,))
    first, _, rest = plain.partition("\n")
    memory = "\n".join([HEADER, "earlier: 4 entries folded, steps 0-1 (saw 4); last: #9 @zed",
                        "step 1: saw #99 @ghost: FEED: #98 @ghost: hi @mallory",
                        "step 1: I replied to #99: @ghost MENTIONS: #99"])
    remembered = f"{first}\n{memory}\n{rest}"
    model = ScriptedModel(seed=5)
    for n in range(200):
        site = CallSite("alice", n)
        reply = json.loads(model.complete(CompletionRequest.chat(remembered), site=site).text)
        assert reply["target"] in (None, 3, 4), reply
        assert "ghost" not in reply["text"], reply
        assert "mallory" not in reply["text"], reply


BAD = [
    (["sim.agents_memory.max_tokens=10"], "sim.agents_memory.max_tokens=10", "at least 16"),
    (["sim.agents_memory.max_tokens=20", "sim.agents_memory.policy=summarise"],
     "sim.agents_memory.max_tokens=20", "at least 32"),
    (["sim.agents_memory.max_tokens=0"], "sim.agents_memory.max_tokens=0", "at least 16"),
    (["sim.agents_memory.max_tokens=-5"], "sim.agents_memory.max_tokens=-5", "at least 16"),
    (["sim.agents_memory.max_tokens=lots"], "sim.agents_memory.max_tokens='lots'", "at least 16"),
    (["sim.agents_memory.max_tokens=300", "sim.agents_memory.policy=forget"],
     "sim.agents_memory.policy", "'drop_oldest' or 'summarise' (got 'forget')"),
    (["sim.engine.participation=0"], "sim.engine.participation", "greater than 0 (got 0)"),
    (["sim.engine.participation=1.5"], "sim.engine.participation",
     "less than or equal to 1 (got 1.5)"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("overrides", "key", "expected"), BAD)
def test_bad_input_exits_2_in_one_line_before_anything_is_written(
        tmp_path: Path, overrides: list[str], key: str, expected: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "simulacra", "run", str(CONFIG), *overrides, "--no-progress"],
        capture_output=True, text=True, timeout=100, check=False, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert key in lines[0]
    assert expected in lines[0]
    assert list(tmp_path.iterdir()) == []  # no run directory, nothing at all


def test_a_budget_in_a_file_is_named_with_the_file(tmp_path: Path) -> None:
    config = tmp_path / "memory.yaml"
    config.write_text(f"sim:\n  world:\n    factory: {CONFIG.parent / 'model.py'}:build\n"
                      "  agents_memory:\n    max_tokens: 8\n", encoding="utf-8")
    from simulacra import ConfigError

    with pytest.raises(ConfigError, match=r"memory\.yaml: sim\.agents_memory\.max_tokens=8 is "
                                          r"below one observation: expected .* at least 16"):
        load_config(config)



def test_a_budget_for_a_factory_that_takes_no_memory_is_refused_in_one_line(
        tmp_path: Path) -> None:
    factory = tmp_path / "plain.py"
    factory.write_text(
        "from simulacra.agents import World\n"
        "def build(agents, seed, llm, feed_size=8, follows=5):\n"
        "    return World(), []\n", encoding="utf-8")
    config = load_config(CONFIG, [f"sim.world.factory={factory}:build",
                                  "sim.agents_memory.max_tokens=64"])
    with pytest.raises(ConfigError) as caught:
        build_society(config)
    text = str(caught.value)
    assert "\n" not in text
    assert "sim.agents_memory.max_tokens=64 is set" in text
    assert "takes no agents_memory parameter" in text
