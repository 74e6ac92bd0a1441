"""ScriptedModel: replies are a pure function of (seed, request key, site), and varied enough.

Determinism is checked under shuffled and threaded call orders (Hypothesis);
the social rules are checked to always give valid JSON actions whose targets
are real feed posts and whose mentions are real agents.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.errors import ConfigError
from simulacra.llm import (
    SOCIAL_ACTIONS,
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    ScriptedModel,
    ScriptedRule,
    ToolSpec,
    parse_social_action,
    social_prompt,
)
from simulacra.rng import derive_seed

PROMPTS = [
    "Tell me about sourdough starters",
    "What is the capital of the harbor district?",
    social_prompt("alice", persona="baker", interests=["bread"], agents=["bob", "carol"]),
    social_prompt(
        "bob",
        interests=["chess", "jazz"],
        agents=["alice", "carol"],
        feed=[(1, "alice", "bread time"), (2, "carol", "hi @bob")],
        mentions=[2],
    ),
]

calls_strategy = st.lists(
    st.tuples(
        st.integers(0, len(PROMPTS) - 1),
        st.sampled_from(["alice", "bob", "7"]) | st.none(),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=25,
)


def _call(model: ScriptedModel, spec: tuple[int, str | None, int]) -> Completion:
    prompt, agent, n = spec
    site = None if agent is None else CallSite(agent, n)
    return model.complete(CompletionRequest.chat(PROMPTS[prompt]), site=site)


@settings(max_examples=40, deadline=None)
@given(calls_strategy, st.randoms(use_true_random=False), st.integers(0, 3))
def test_replies_do_not_depend_on_call_order(
    calls: list[tuple[int, str | None, int]], shuffle: random.Random, seed: int
) -> None:
    reference = {spec: _call(ScriptedModel(seed), spec) for spec in calls}

    model = ScriptedModel(seed)  # one model, calls in another order, some repeated
    order = calls + calls[: len(calls) // 2]
    shuffle.shuffle(order)
    shuffled = {spec: _call(model, spec) for spec in order}

    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = dict(zip(order, pool.map(lambda s: _call(model, s), order), strict=True))

    assert shuffled == reference
    assert threaded == reference


@pytest.mark.parametrize("seed", [0, -5, 2**70, "study", b"\x00raw"])
@pytest.mark.parametrize("site", [None, CallSite("alice", 0), CallSite("ü/x", 12345)])
def test_reply_stream_is_derive_seed_of_seed_key_and_site(
    seed: int | str | bytes, site: CallSite | None
) -> None:
    """Pinned to the documented derivation: derive_seed(seed, tag, key, agent, n)."""
    request = CompletionRequest.chat("hello")
    path: tuple[int | str, ...] = (request.key(),)
    if site is not None:
        path += (site.agent, site.n)
    expected = random.Random(derive_seed(seed, "simulacra.llm.scripted.v1", *path))
    assert ScriptedModel(seed).rng_for(request, site).getstate() == expected.getstate()


def test_replies_depend_on_seed_site_and_request() -> None:
    request = CompletionRequest.chat(PROMPTS[0])
    texts = {
        ScriptedModel(seed).complete(request, site=CallSite(agent, n)).text
        for seed in range(3)
        for agent in ("a", "b")
        for n in range(3)
    }
    assert len(texts) > 10  # 18 combinations, nearly all different


def test_async_equals_sync() -> None:
    import asyncio

    model = ScriptedModel(5)
    request = CompletionRequest.chat(PROMPTS[3])
    site = CallSite("bob", 1)
    assert asyncio.run(model.acomplete(request, site=site)) == model.complete(request, site=site)


def test_token_counts_are_deterministic_and_max_tokens_truncates() -> None:
    model = ScriptedModel(0)
    request = CompletionRequest.chat("Explain harbors in detail please")
    full = model.complete(request)
    words = len(full.text.split())
    assert full.completion_tokens == -(-words * 4 // 3)
    assert full.prompt_tokens == -(-5 * 4 // 3) + 3
    short = model.complete(CompletionRequest.chat("Explain harbors in detail please", max_tokens=4))
    assert short.finish_reason == "length"
    assert short.completion_tokens <= 4


def test_custom_rules_run_in_order_before_the_fallback() -> None:
    seen: list[str] = []

    def shout(request: CompletionRequest, rng: random.Random) -> str:
        seen.append(request.prompt)
        return f"{request.prompt.upper()} {rng.randint(0, 9)}"

    model = ScriptedModel(
        1,
        rules=[
            ("shout", lambda r: r.prompt.startswith("!"), shout),
            ScriptedRule("fixed", lambda r: "fixed" in r.prompt, lambda r, rng: Completion("ok")),
        ],
    )
    loud = model.complete(CompletionRequest.chat("!hey"))
    assert loud.text.startswith("!HEY ")
    assert loud.metadata == {"provider": "scripted", "rule": "shout"}
    assert model.complete(CompletionRequest.chat("fixed please")).text == "ok"
    assert model.complete(CompletionRequest.chat("other")).metadata["rule"] == "generic"
    assert model.calls == 3
    with pytest.raises(ConfigError, match=r"rules\[0\]"):
        ScriptedModel(rules=["nope"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="must return a Completion or a str"):
        ScriptedModel(rules=[("bad", lambda r: True, lambda r, rng: 3)]).complete(  # type: ignore[arg-type,return-value]
            CompletionRequest.chat("x")
        )


def test_schema_and_tool_rules() -> None:
    model = ScriptedModel(2)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 1, "maximum": 9},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2},
        },
    }
    reply = model.complete(
        CompletionRequest.chat("describe", response_schema_json=json.dumps(schema))
    )
    value = json.loads(reply.text)
    assert set(value) == {"name", "age", "tags"}
    assert 1 <= value["age"] <= 9
    assert len(value["tags"]) == 2
    assert set(value["tags"]) <= {"a", "b"}

    tool = ToolSpec("weather", parameters_json='{"properties":{"city":{"type":"string"}}}')
    call = model.complete(CompletionRequest.chat("weather?", tools=[tool]))
    assert call.finish_reason == "tool_calls"
    assert call.tool_calls[0].name == "weather"
    answer = model.complete(
        CompletionRequest(
            (ChatMessage("user", "weather?"), ChatMessage("tool", "sunny", name="call_1")),
            tools=(tool,),
        )
    )
    assert answer.tool_calls == ()
    assert "sunny" in answer.text


# -- the social convention ----------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=9)


@st.composite
def social_cases(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    handles = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    me, others = handles[0], handles[1:]
    ids = draw(st.lists(st.integers(0, 9999), max_size=8, unique=True))
    feed = []
    for post_id in ids:
        author = draw(st.sampled_from(handles))
        text = " ".join(draw(st.lists(words, min_size=1, max_size=8)))
        if draw(st.booleans()):
            text += f" @{draw(st.sampled_from(handles))}"
        parent = draw(st.none() | st.sampled_from(ids))
        feed.append((post_id, author, text, parent))
    mentions = draw(st.lists(st.sampled_from(ids), max_size=3, unique=True)) if ids else []
    interests = draw(st.lists(words, max_size=4))
    persona = " ".join(draw(st.lists(words, max_size=4)))
    return me, {
        "persona": persona,
        "interests": interests,
        "agents": others,
        "feed": feed,
        "mentions": mentions,
    }


@settings(max_examples=100, deadline=None)
@given(social_cases(), st.integers(0, 2**32), st.integers(0, 50))
def test_social_replies_are_valid_actions(
    case: tuple[str, dict[str, object]], seed: int, n: int
) -> None:
    me, parts = case
    prompt = social_prompt(me, **parts)  # type: ignore[arg-type]
    completion = ScriptedModel(seed).complete(
        CompletionRequest.chat(prompt, system="be social"), site=CallSite(me, n)
    )
    data = json.loads(completion.text)
    assert set(data) == {"action", "text", "target"}
    assert data == parse_social_action(completion.text)
    action, text, target = data["action"], data["text"], data["target"]
    assert action in SOCIAL_ACTIONS
    authors = {post_id: author for post_id, author, _, _ in parts["feed"]}  # type: ignore[attr-defined]
    if action in ("reply", "like"):
        assert target in authors
        assert authors[target] != me  # never one's own post
    else:
        assert target is None
    if action in ("post", "reply"):
        assert text.strip()
    elif action == "follow":
        assert re.fullmatch(r"@\w+( @\w+)?", text)  # whom to follow
    else:
        assert text == ""
    if action == "reply":
        assert text.startswith(f"@{authors[target]} ")
    known = set(parts["agents"]) | set(authors.values())  # type: ignore[arg-type]
    mentioned = set(re.findall(r"@(\w+)", text))
    assert mentioned <= known - {me}


def test_social_replies_are_varied() -> None:
    model = ScriptedModel(11)
    agents = [f"user{i}" for i in range(10)]
    feed = [(i, agents[i % 10], f"post about topic{i} and gardening") for i in range(1, 9)]
    quiet = social_prompt("me", interests=["gardening", "chess", "jazz"], agents=agents, feed=feed)
    actions: Counter[str] = Counter()
    texts = set()
    with_mentions = 0
    for n in range(400):
        data = json.loads(
            model.complete(CompletionRequest.chat(quiet), site=CallSite("me", n)).text
        )
        actions[data["action"]] += 1
        texts.add(data["text"])
        with_mentions += data["action"] == "post" and "@" in data["text"]
    assert set(actions) == set(SOCIAL_ACTIONS)
    assert 0.25 < actions["post"] / 400 < 0.45
    assert with_mentions > 0.3 * actions["post"]
    assert len(texts) > 150

    mentioned = social_prompt("me", agents=agents, feed=feed, mentions=[3, 5])
    replies = [
        json.loads(model.complete(CompletionRequest.chat(mentioned), site=CallSite("me", n)).text)
        for n in range(200)
    ]
    to_mentions = sum(r["action"] == "reply" and r["target"] in (3, 5) for r in replies)
    assert to_mentions > 0.7 * len(replies)


def test_social_prompt_format_matches_the_convention() -> None:
    prompt = social_prompt(
        "alice",
        persona="curious baker",
        interests=["bread", "chess"],
        agents=["bob", "carol", "dave"],
        feed=[
            (12, "bob", "Anyone tried sourdough? @alice"),
            {"id": 15, "author": "carol", "text": "yes!\nreally", "reply_to": 12},
        ],
        mentions=[12],
    )
    assert prompt.splitlines()[:6] == [
        "You are @alice. Persona: curious baker. Interests: bread, chess.",
        "AGENTS: @bob @carol @dave",
        "FEED:",
        "#12 @bob: Anyone tried sourdough? @alice",
        "#15 @carol (reply to #12): yes! really",
        "MENTIONS: #12",
    ]
    assert prompt.splitlines()[6].startswith("TASK: choose one action. Reply with JSON:")
    with pytest.raises(ConfigError, match="handle"):
        social_prompt("@alice")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"action": "post", "text": "hi", "target": null}', ("post", "hi", None)),
        ('Sure! ```json\n{"action": "like", "target": "#4"}\n```', ("like", "", 4)),
        ('{"action": "idle"}', ("idle", "", None)),
    ],
)
def test_parse_social_action_is_tolerant(reply: str, expected: tuple[object, ...]) -> None:
    data = parse_social_action(reply)
    assert (data["action"], data["text"], data["target"]) == expected


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("no json here", "must hold a JSON object"),
        ('{"action": "shout"}', "action must be one of"),
        ('{"action": "reply", "text": "x"}', "needs a target"),
        ('{"action": "like", "target": 1.5}', "target must be an int"),
    ],
)
def test_parse_social_action_rejects_bad_replies(reply: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_social_action(reply)
