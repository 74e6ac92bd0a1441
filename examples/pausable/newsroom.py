"""``python examples/pausable/newsroom.py``: blocking-style agents that pause for a human.

Part 1 (deterministic, virtual time): each writer is a plain function that
drafts a post with ``ctx.llm.complete(...)`` (a ``ScriptedModel``; the call
takes a simulated duration from a ``LatencyModel``), then pauses with
``ctx.pause(("review", draft))`` until the editor (host code) approves or
rejects it. A rejected writer revises and asks again; an approved one waits
for its publishing slot with ``ctx.sleep`` and returns. The editor reviews in
a seeded order, so the same seed prints the same desk and trace digest.

Part 2 (async, wall clock): the same kind of function on threads under an
``AsyncHost``, fanning results in through a ``Channel``: whatever order they
arrive in, the summary is sorted by writer, never by completion order.

Options: ``--seed N``, ``--writers N``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import AsyncHost, Channel, PausableContext, PausableHost, digest
from simulacra.llm import CompletionRequest, LatencyModel, ScriptedModel

TOPICS = ("bread", "chess", "rivers", "bees", "trains", "tea")


def writer(ctx: PausableContext, topic: str) -> dict[str, Any]:
    """Draft, pause for review, revise until approved, then publish at the next slot."""
    drafts = 0
    notes: list[str] = []
    prompt = f"Write one sentence about {topic}."
    while True:
        draft = ctx.llm.complete(CompletionRequest.chat(prompt)).text
        drafts += 1
        verdict = ctx.pause(("review", draft))  # the editor decides; we continue right here
        if verdict == "approve":
            break
        notes.append(verdict)
        prompt = f"Rewrite this sentence about {topic}, {verdict}: {draft}"
    slot = float(int(ctx.now) + 1)  # publish on the next whole hour
    ctx.sleep(slot - ctx.now)
    return {"topic": topic, "drafts": drafts, "notes": notes, "published": ctx.now}


def newsroom(seed: int = 0, writers: int = 4) -> dict[str, Any]:
    """Run the desk until every post is published; return what happened, in writer order."""
    host = PausableHost(seed=seed, trace=True, llm=ScriptedModel(seed),
                        latency=LatencyModel(base=0.3, noise_sigma=0.3))
    editor = host.sim.rng("editor")
    agents = [host.spawn(writer, TOPICS[i % len(TOPICS)], name=f"writer-{i}")
              for i in range(writers)]
    for agent in agents:
        host.start(agent)  # each runs until its first blocking call (the model call)
    reviews = 0
    while True:
        host.run()  # virtual time: model calls complete, writers pause for review
        waiting = [a for a in agents if a.status.name == "PAUSED"]
        if not waiting:
            break
        editor.shuffle(waiting)  # seeded review order
        for agent in waiting:
            reviews += 1
            if editor.random() < 0.5:
                host.resume(agent, "approve")
            else:
                host.resume(agent, editor.choice(["shorter", "funnier", "with a fact"]))
    return {
        "posts": host.results(),
        "reviews": reviews,
        "now": host.now,
        "digest": digest(host.sim),
    }


def fan_in(writers: int = 4) -> list[tuple[str, int]]:
    """Async agents on threads send into one Channel; the host sorts what arrives."""
    channel: Channel[tuple[str, int]] = Channel(capacity=2)

    def counter(ctx: Any, n: int) -> None:
        for i in range(n):
            channel.send((ctx.name, i))

    with AsyncHost() as host:
        agents = [host.spawn(counter, 3, name=f"async-{i}") for i in range(writers)]
        for agent in agents:
            host.start(agent)  # returns at once; the agents run concurrently
        got = [channel.recv() for _ in range(3 * writers)]
        host.join_all()
    return sorted(got)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the desk of one seed and the async fan-in."""
    parser = argparse.ArgumentParser(prog="python examples/pausable/newsroom.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args(argv)
    if args.writers < 1:
        print(f"error: writers must be an int >= 1, got {args.writers}", file=sys.stderr)
        return 2
    result = newsroom(args.seed, args.writers)
    for name, post in result["posts"].items():
        notes = ", ".join(post["notes"]) or "-"
        print(f"{name:10} {post['topic']:7} drafts={post['drafts']} "
              f"published t={post['published']:.0f}  notes: {notes}")
    print(f"reviews={result['reviews']} end t={result['now']:.2f} digest={result['digest'][:16]}")
    items = fan_in(args.writers)
    print(f"async fan-in: {len(items)} items from {len({n for n, _ in items})} agents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
