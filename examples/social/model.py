"""The factory ``config.yaml`` names: seeded personas, interests and a follow graph.

``build(agents=50, seed=SeedTree, llm={...}, feed_size=8, follows=5)`` returns
the world and its agents. Everything random is drawn from the seed tree, per
agent (``seed.child("agent", i)``), so agent i is the same whatever the
population size. With ``sim.agents_memory.max_tokens`` set, the run passes
``agents_memory={"max_tokens": N, "policy": P}`` too, and each agent gets its
own :class:`simulacra.AgentMemory` of that budget.

``KNOBS`` are what a scenario may change during a run (``simulacra run
config.yaml --scenario FILE``; see ``docs/scenarios.md``): inject a post,
resize the feeds, interview agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulacra import AgentMemory, ConfigError, SeedTree
from simulacra.llm import SOCIAL_SCHEMA, canonical_json
from simulacra.scenarios import Knob, Knobs

try:
    from .agents import SocialAgent
    from .world import SocialWorld
except ImportError:  # loaded with this directory on sys.path
    from world import SocialWorld  # type: ignore[no-redef]

    from agents import SocialAgent  # type: ignore[no-redef]

__all__ = ["INTERESTS", "KNOBS", "build"]

#: What a scenario may change during a run. Times are steps on the round engine
#: (a change at 2 acts before step 2's turns) and virtual time on the event-driven one.
KNOBS = Knobs(
    Knob("post", "str", "", action=True,
         doc="inject a post with this text, by the system account (every agent follows it); "
             "'@handle: text' posts it as that agent; @mentions notify as usual"),
    Knob("feed_size", "int", 8, low=1, high=100, unit="posts",
         doc="how many posts each agent's feed shows"),
    Knob("interview", "str", "", action=True,
         doc="ask agents a question, 'handle,handle: question' ('*: question' asks everyone); "
             "their answers are recorded and nothing in the network changes"),
)

NAMES = ("ada", "ben", "cleo", "dev", "eli", "fay", "gus", "hana", "ivo", "june", "kai", "lea",
         "milo", "nia", "otto", "pia", "quin", "rosa", "sam", "tara", "uma", "vik", "wren",
         "xavi", "yara", "zoe")
ADJECTIVES = ("curious", "grumpy", "cheerful", "thoughtful", "sarcastic", "earnest", "restless",
              "patient", "witty", "shy", "bold", "nerdy")
ROLES = ("baker", "nurse", "student", "retired teacher", "software engineer", "gardener",
         "bus driver", "journalist", "musician", "chess coach", "carpenter", "biologist",
         "barista", "startup founder", "librarian", "cyclist")
INTERESTS = ("bread", "chess", "climate", "jazz", "football", "sci-fi", "gardening", "cats",
             "coffee", "hiking", "photography", "startups", "poetry", "cooking", "astronomy",
             "local politics", "board games", "running", "history", "open source", "film",
             "birdwatching", "vinyl", "cycling")


def handle(i: int, agents: int) -> str:
    """Agent i's handle: a name and a zero-padded number (``ada007``), so ids sort by i."""
    width = len(str(max(agents - 1, 0)))
    return f"{NAMES[i % len(NAMES)]}{i:0{width}d}"


def build(*, agents: int, seed: SeedTree, llm: dict[str, Any], feed_size: int = 8,
          follows: int = 5, agents_memory: Mapping[str, Any] | None = None,
          local: bool = False) -> tuple[SocialWorld, list[SocialAgent]]:
    """The social world and its agents.

    ``local=True`` (``sim.world.local=true``) makes a street: agent i follows
    the *follows* agents nearest to it on a ring (i+1, i-1, i+2, ...), and sees
    and reaches only its neighbours (:class:`world.SocialWorld`, ``local``).
    """
    if not isinstance(local, bool):
        raise ConfigError(f"sim.world.local must be true or false, got "
                          f"{type(local).__name__} {local!r}")
    if agents < 2:
        raise ConfigError(f"sim.agents must be >= 2 for a social network, got {agents}")
    if feed_size < 1 or follows < 0:
        raise ConfigError(f"sim.world.feed_size must be >= 1 and sim.world.follows >= 0, "
                          f"got {feed_size} and {follows}")
    handles = [handle(i, agents) for i in range(agents)]
    people: list[SocialAgent] = []
    graph: dict[str, list[str]] = {}
    settings = dict(llm)  # one dict for all: nobody changes it (a million agents, one copy)
    if settings.pop("response_schema", False):  # sim.llm.response_schema: the reply's shape
        settings["response_schema_json"] = canonical_json(SOCIAL_SCHEMA)
    # seed.child("agent", i).stream("persona") for each i, the shared part hashed once
    streams = seed.child_streams("agent", range(agents), "persona")
    for i, (name, rng) in enumerate(zip(handles, streams, strict=True)):
        persona = f"{rng.choice(ADJECTIVES)} {rng.choice(ROLES)}"
        interests = tuple(rng.sample(INTERESTS, 2 + rng.randrange(2)))
        chosen: set[int] = set()
        if local:  # the nearest on the ring, alternately right and left
            k = 1
            while len(chosen) < min(follows, agents - 1):
                chosen.add((i + (k + 1) // 2 * (1 if k % 2 else -1)) % agents)
                k += 1
        while len(chosen) < min(follows, agents - 1):
            j = rng.randrange(agents)
            if j != i:
                chosen.add(j)
        graph[name] = [handles[j] for j in sorted(chosen)]
        memory = None if agents_memory is None else AgentMemory(**agents_memory)
        people.append(SocialAgent(name, persona=persona, interests=interests, llm=settings,
                                  memory=memory))
    return SocialWorld(handles, graph, feed_size=feed_size, local=local), people
