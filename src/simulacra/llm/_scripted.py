"""``ScriptedModel``: a deterministic fake language model that ships in the library.

Its reply is a pure function of ``(seed, request.key(), site)``: a random
stream is derived from that triple (``derive_seed(seed,
"simulacra.llm.scripted.v1", key, agent, n)``) and handed to the first rule
whose predicate matches the request. Nothing depends on call order, threads or
the wall clock, so any execution order gives the same replies.

The default rules understand the social prompt convention (see
:func:`social_prompt`), answer JSON-schema requests with a value that follows
the schema, call a tool when tools are offered, and otherwise write a varied
sentence from seeded templates.
"""

from __future__ import annotations

import hashlib
import json
import operator
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulacra.errors import ConfigError
from simulacra.rng import SEED_SCHEME, derive_seed

from ._types import (
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    ToolCall,
    approx_tokens,
    canonical_json,
)

__all__ = [
    "SOCIAL_ACTIONS",
    "SOCIAL_SCHEMA",
    "SOCIAL_TASK",
    "ScriptedModel",
    "ScriptedRule",
    "default_rules",
    "parse_social_action",
    "social_prompt",
    "social_rules",
]

SCRIPTED_TAG = "simulacra.llm.scripted.v1"
"""The path element under the seed that scripted replies are derived from."""

SOCIAL_ACTIONS = ("post", "reply", "like", "follow", "idle")
"""The actions of the social prompt convention."""

SOCIAL_TASK = (
    'TASK: choose one action. Reply with JSON: {"action": "post"|"reply"|"like"|"follow"|"idle", '
    '"text": str, "target": int|null}'
)
"""The last line of a social prompt; :func:`social_rules` matches ``TASK: choose one action``."""

#: The JSON schema of a social reply (``sim.llm.response_schema: true`` sends it), the
#: shape :data:`SOCIAL_TASK` asks for and :func:`parse_social_action` reads.
SOCIAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": list(SOCIAL_ACTIONS)},
                   "text": {"type": "string", "maxLength": 200},
                   "target": {"type": ["integer", "null"]}},
    "required": ["action", "text", "target"],
    "additionalProperties": False,
}

_SOCIAL_MARKER = "TASK: choose one action"

Predicate = Callable[[CompletionRequest], bool]
Responder = Callable[[CompletionRequest, random.Random], "Completion | str"]


@dataclass(frozen=True, slots=True)
class ScriptedRule:
    """One rule of a :class:`ScriptedModel`: when *predicate* holds, *responder* replies.

    Attributes:
        name: A name, recorded in the completion's metadata as ``"rule"``.
        predicate: ``predicate(request) -> bool``; it must not draw randomness.
        responder: ``responder(request, rng) -> Completion | str``. *rng* is a
            ``random.Random`` seeded by ``(seed, request key, site)``; a str
            becomes a completion with deterministic token counts.
    """

    name: str
    predicate: Predicate
    responder: Responder

    def __post_init__(self) -> None:
        name: object = self.name
        if not isinstance(name, str) or not name:
            raise ConfigError(f"ScriptedRule.name must be a non-empty str, got {self.name!r}")
        if not callable(self.predicate):
            raise ConfigError(
                f"ScriptedRule.predicate must be callable(request) -> bool, got {self.predicate!r}"
            )
        if not callable(self.responder):
            raise ConfigError(
                "ScriptedRule.responder must be callable(request, rng) -> Completion | str, "
                f"got {self.responder!r}"
            )


def _coerce_rule(rule: object, index: int) -> ScriptedRule:
    if isinstance(rule, ScriptedRule):
        return rule
    if isinstance(rule, tuple) and len(rule) == 3:
        return ScriptedRule(*rule)
    raise ConfigError(
        f"rules[{index}] must be a ScriptedRule or a (name, predicate, responder) tuple, "
        f"got {rule!r}"
    )


def _seed_item(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(8, "big") + payload


def _seed_item_int(value: int) -> bytes:
    magnitude = -value if value < 0 else value
    sign = b"\x01" if value < 0 else b"\x00"
    return _seed_item(b"i", sign + magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big"))


def _seed_item_str(value: str) -> bytes:
    return _seed_item(b"s", value.encode("utf-8"))


def _seed_item_master(value: int | str | bytes) -> bytes:
    if isinstance(value, str):
        return _seed_item_str(value)
    if isinstance(value, bytes):
        return _seed_item(b"b", bytes(value))
    return _seed_item_int(operator.index(value))  # an int, or an int-like such as numpy.int64


#: _seed_item_int(n) of the first call numbers (an agent's n-th call).
_INT_ITEMS = tuple(_seed_item_int(n) for n in range(4096))


def _int_item(n: int) -> bytes:
    return _INT_ITEMS[n] if 0 <= n < 4096 else _seed_item_int(n)


_METADATA: dict[str, str] = {}


def _metadata(rule: str) -> str:
    text = _METADATA.get(rule)
    if text is None:
        text = _METADATA.setdefault(rule, canonical_json({"provider": "scripted", "rule": rule}))
    return text


def _prompt_tokens(request: CompletionRequest) -> int:
    return sum(approx_tokens(m.content) + 3 for m in request.messages)


def _as_completion(request: CompletionRequest, reply: Completion | str, rule: str) -> Completion:
    if isinstance(reply, Completion):
        return reply
    if not isinstance(reply, str):
        raise ConfigError(
            f"scripted rule {rule!r} must return a Completion or a str, "
            f"got {type(reply).__name__} {reply!r}"
        )
    text = reply
    tokens = approx_tokens(text)
    finish = "stop"
    if request.max_tokens is not None and tokens > request.max_tokens:
        text = " ".join(text.split()[: request.max_tokens * 3 // 4])
        tokens = approx_tokens(text)
        finish = "length"
    return Completion(
        text,
        prompt_tokens=_prompt_tokens(request),
        completion_tokens=tokens,
        finish_reason=finish,
        model=request.model,
        metadata_json=_metadata(rule),
    )


class ScriptedModel:
    """A deterministic fake :class:`LanguageModel`: seeded templates and rules.

    The reply to a request is a pure function of ``(seed, request.key(),
    site)``, never of call order or wall clock. Rules are tried in order; the
    first whose predicate holds answers, and a generic fallback answers when
    none does. Thread-safe; :meth:`acomplete` answers at once.

    Args:
        seed: The seed of every reply (int, str or bytes).
        rules: ``ScriptedRule`` objects or ``(name, predicate, responder)``
            tuples, tried in order. ``None`` means :func:`default_rules`.
    """

    def __init__(
        self,
        seed: int | str | bytes = 0,
        rules: Iterable[ScriptedRule | tuple[str, Predicate, Responder]] | None = None,
    ) -> None:
        derive_seed(seed)  # validates the type, naming the field
        self._seed = seed
        # derive_seed(seed, SCRIPTED_TAG, key, agent, n), with the common prefix hashed once
        self._prefix = hashlib.sha256(
            _seed_item_str(SEED_SCHEME) + _seed_item_master(seed) + _seed_item_str(SCRIPTED_TAG)
        )
        chosen = default_rules() if rules is None else rules
        if isinstance(chosen, str | bytes | Mapping):
            raise ConfigError(
                f"rules must be a sequence of ScriptedRule, got {type(chosen).__name__}"
            )
        self._rules = tuple(_coerce_rule(rule, i) for i, rule in enumerate(chosen))
        self._lock = threading.Lock()
        self._calls = 0

    @property
    def seed(self) -> int | str | bytes:
        """The seed of every reply."""
        return self._seed

    @property
    def rules(self) -> tuple[ScriptedRule, ...]:
        """The rules, in the order they are tried (the generic fallback is not listed)."""
        return self._rules

    @property
    def calls(self) -> int:
        """How many completions this model has made."""
        return self._calls

    def rng_for(self, request: CompletionRequest, site: CallSite | None = None) -> random.Random:
        """Return the random stream that answers *request* at *site* (fresh each time)."""
        h = self._prefix.copy()
        # _seed_item_str(key) [+ _seed_item_str(agent) + _seed_item_int(n)], in one update
        key = request.key().encode("utf-8")
        if site is None:
            h.update(b"s" + len(key).to_bytes(8, "big") + key)
        else:
            agent = site.agent.encode("utf-8")
            h.update(b"s" + len(key).to_bytes(8, "big") + key + b"s"
                     + len(agent).to_bytes(8, "big") + agent + _int_item(site.n))
        return random.Random(int.from_bytes(h.digest()[:16], "big"))

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """Return the scripted completion of *request* at *site*."""
        if not isinstance(request, CompletionRequest):
            raise ConfigError(
                f"request must be a CompletionRequest, got {type(request).__name__} {request!r}"
            )
        rng = self.rng_for(request, site)
        with self._lock:
            self._calls += 1
        for rule in self._rules:
            if rule.predicate(request):
                return _as_completion(request, rule.responder(request, rng), rule.name)
        return _as_completion(request, _generic_reply(request, rng), "generic")

    async def acomplete(
        self, request: CompletionRequest, *, site: CallSite | None = None
    ) -> Completion:
        """Return the scripted completion of *request* at *site* (no waiting involved)."""
        return self.complete(request, site=site)

    def __repr__(self) -> str:
        names = [rule.name for rule in self._rules]
        return f"ScriptedModel(seed={self._seed!r}, rules={names})"


# -- the social prompt convention ---------------------------------------------

_NAME = r"\w(?:[\w.-]*\w)?"
_NAME_RE = re.compile(_NAME)
_SELF_RE = re.compile(rf"You are @({_NAME})")
_INTERESTS_RE = re.compile(r"Interests:\s*(.*?)\.?\s*$")
_FEED_RE = re.compile(r"^[ \t]*#(\d+) @([\w.-]+)(?: \(reply to #\d+\))?: ?(.*)$", re.M)
_HEADERS = ("AGENTS:", "FEED:", "MENTIONS:", "TASK:")
_AGENT_RE = re.compile(r"@([\w.-]*\w)")
_HEADER_RE = {
    header: re.compile(rf"^[ \t]*{header}", re.M) for header in ("AGENTS:", "FEED:", "MENTIONS:")
}
_NEXT_HEADER_RE = re.compile(r"^[ \t]*(?:AGENTS|FEED|MENTIONS|TASK):", re.M)
_ID_RE = re.compile(r"#(\d+)")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")

FeedItem = tuple[int, str, str] | tuple[int, str, str, int | None] | Mapping[str, Any]


#: Texts cleaned lately (a feed shows the same posts to many agents). Bounded.
_CLEAN: dict[str, str] = {}


def _clean_line(text: str) -> str:
    if type(text) is not str:
        return " ".join(str(text).split())
    clean = _CLEAN.get(text)
    if clean is None:
        if len(_CLEAN) >= 16384:
            _CLEAN.clear()
        clean = _CLEAN[text] = " ".join(text.split())
    return clean


def social_prompt(
    name: str,
    *,
    persona: str = "",
    interests: Sequence[str] = (),
    agents: Iterable[str] = (),
    feed: Iterable[FeedItem] = (),
    mentions: Iterable[int] = (),
) -> str:
    """Build a user prompt in the social convention that :func:`social_rules` understands.

    The format is::

        You are @alice. Persona: curious baker. Interests: bread, chess.
        AGENTS: @bob @carol @dave
        FEED:
        #12 @bob: Anyone tried sourdough? @alice
        #15 @carol (reply to #12): yes!
        MENTIONS: #12
        TASK: choose one action. Reply with JSON: {"action": ...}

    Args:
        name: The agent's handle, without ``@``.
        persona: A short description.
        interests: Topics the agent posts about.
        agents: Handles of other agents it may mention (without ``@``).
        feed: Visible posts, oldest first: ``(id, author, text)``,
            ``(id, author, text, reply_to)`` or a mapping with those keys.
            Line breaks in texts become spaces.
        mentions: Ids of feed posts that mention this agent.
    """
    if not _NAME_RE.fullmatch(str(name)):
        raise ConfigError(f"name must be a handle like 'alice' (no '@'), got {name!r}")
    cleaned = [_clean_line(i) for i in interests]
    interest_text = ", ".join(cleaned)
    clean_persona = _clean_line(persona)
    agents_line = "AGENTS: " + " ".join([f"@{a}" for a in agents])
    lines = [
        f"You are @{name}. Persona: {clean_persona}. Interests: {interest_text}.",
        agents_line,
        "FEED:",
    ]
    # What _parse_social will read back, worked out here while it is cheap to (see _PARSED);
    # None when a part might read back otherwise than it was given.
    posts: list[_Post] | None = ([] if "Interests:" not in clean_persona and "\n" not in agents_line
                                 and not any("," in i for i in cleaned) else None)
    for item in feed:
        if isinstance(item, Mapping):
            post_id, author, text = item["id"], item["author"], item["text"]
            reply_to = item.get("reply_to")
        else:
            post_id, author, text = item[0], item[1], item[2]
            reply_to = item[3] if len(item) > 3 else None
        parent = None if reply_to is None else int(reply_to)
        number = int(post_id)
        body = _clean_line(text)
        if parent is None:
            lines.append(f"#{number} @{author}: {body}")
        else:
            lines.append(f"#{number} @{author} (reply to #{parent}): {body}")
            if parent < 0:
                posts = None
        if posts is not None:
            if number >= 0 and type(author) is str and _is_author(author):
                posts.append((number, author, body))
            else:
                posts = None
    numbers = [int(m) for m in mentions]
    ids = " ".join([f"#{m}" for m in numbers])
    lines.append(f"MENTIONS: {ids or 'none'}")
    lines.append(SOCIAL_TASK)
    prompt = "\n".join(lines)
    if posts is not None and all(m >= 0 for m in numbers):
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[prompt] = _Social(str(name), tuple(i for i in cleaned if i),
                                  agents_line[len("AGENTS:"):], posts, tuple(numbers))
    return prompt


_Post = tuple[int, str, str]  # (id, author, text): plain tuples, built in C by findall


@dataclass(frozen=True, slots=True)
class _Social:
    name: str
    interests: tuple[str, ...]
    agents_text: str  # the AGENTS section, read only when a mention is written
    feed: list[_Post]
    mentions: tuple[int, ...]


def _section(text: str, header: str) -> str:
    """Return the text after *header* up to the next header line (or the end)."""
    at = text.find("\n" + header)
    if at < 0 and not text.startswith(header):  # an indented header: the slow path
        found = _HEADER_RE[header].search(text)
        if found is None:
            return ""
        after = _NEXT_HEADER_RE.search(text, found.end())
        return text[found.end() : after.start() if after else len(text)]
    start = at + 1 + len(header) if at >= 0 else len(header)
    end = len(text)
    for other in _HEADERS:
        at = text.find("\n" + other, start, end)
        if at >= 0:
            end = at
    return text[start:end]


#: What _parse_social reads from a prompt that social_prompt wrote lately, worked out as it
#: wrote it (parsing a prompt of a social demo's turn again cost a third of a scripted call).
#: Taken (popped) by the first reading; bounded: cleared when full. A prompt that is not
#: here (changed after it was written, or written elsewhere) is parsed, to the same result:
#: social_prompt puts an entry only for parts that read back as given (tests check it).
_PARSED: dict[str, _Social] = {}
_PARSED_MAX = 2048
_AUTHOR_RE = re.compile(r"[\w.-]+")
_AUTHORS: dict[str, bool] = {}


def _is_author(author: str) -> bool:
    """Whether ``_FEED_RE`` reads *author* back whole (remembered: handles repeat)."""
    ok = _AUTHORS.get(author)
    if ok is None:
        if len(_AUTHORS) >= 65536:
            _AUTHORS.clear()
        ok = _AUTHORS[author] = _AUTHOR_RE.fullmatch(author) is not None
    return ok


def _parse_social(text: str) -> _Social:
    """Read the social prompt convention; sections may come in any order, lines indented."""
    known = _PARSED.pop(text, None)
    if known is not None:
        return known
    return _read_social(text)


def _read_social(text: str) -> _Social:
    """:func:`_parse_social` without the entries of social_prompt: the text read."""
    name = ""
    interests: tuple[str, ...] = ()
    found = _SELF_RE.search(text)
    if found:
        name = found.group(1)
        line_end = text.find("\n", found.end())
        line = text[found.end() : line_end if line_end >= 0 else len(text)]
        listed = _INTERESTS_RE.search(line)
        if listed:
            interests = tuple(i.strip() for i in listed.group(1).split(",") if i.strip())
    feed = [(int(i), author, body) for i, author, body in _FEED_RE.findall(_section(text, "FEED:"))]
    mentions = tuple(int(i) for i in _ID_RE.findall(_section(text, "MENTIONS:")))
    return _Social(name, interests, _section(text, "AGENTS:"), feed, mentions)


_POSTS = (
    "Just spent the whole afternoon on {i}. Worth it.",
    "Hot take: {i} is underrated.",
    "Anyone else thinking about {i} today?",
    "Three things I love: {i}, {j}, and a quiet morning.",
    "Learning more about {i} every day. Any tips?",
    "Can't stop thinking about how {i} connects to {j}.",
    "New week, new {i} project!",
    "Honest question: what got you into {i}?",
    "Small win today with {i}. Feeling good.",
    "If you like {i}, you will probably like {j} too.",
    "Unpopular opinion: {j} beats {i}, at least on Mondays.",
    "Reading everything I can find about {i} right now.",
)
_POST_MENTIONS = (
    "What do you think, {m}?",
    "cc {m}",
    "{m} you would enjoy this.",
    "Thanks {m} for the idea!",
    "{m} we should talk about this.",
)
_REPLIES = (
    "{a} totally agree!",
    "{a} interesting point about {t}.",
    "{a} not sure about that, but {i} taught me patience.",
    "{a} this made my day.",
    "{a} ha, same here. {i} is the best.",
    "{a} tell me more about {t}!",
    "{a} I see it differently, honestly.",
    "{a} good one. Have you tried {i}?",
    "{a} thanks for the mention! {t} is close to my heart.",
    "{a} could not have said it better.",
)
_FALLBACK_INTERESTS = ("the weather", "good coffee", "weekend plans", "books", "music")


def _mention(rng: random.Random, social: _Social, exclude: Iterable[str] = ()) -> str:
    skip = {social.name, *exclude}
    others = [a for a in _AGENT_RE.findall(social.agents_text) if a not in skip]
    if not others:
        return ""
    count = 2 if len(others) > 1 and rng.random() < 0.3 else 1
    return " ".join(f"@{a}" for a in rng.sample(others, count))


def _social_text_post(rng: random.Random, social: _Social) -> str:
    interests = social.interests or _FALLBACK_INTERESTS
    i = rng.choice(interests)
    j = rng.choice(interests)
    text = rng.choice(_POSTS).format(i=i, j=j)
    if rng.random() < 0.5:
        mention = _mention(rng, social)
        if mention:
            text = f"{text} {rng.choice(_POST_MENTIONS).format(m=mention)}"
    return text


def _social_text_reply(rng: random.Random, social: _Social, target: _Post) -> str:
    interests = social.interests or _FALLBACK_INTERESTS
    _, author, body = target
    words = _WORD_RE.findall(body)
    topic = rng.choice(words) if words else rng.choice(interests)
    text = rng.choice(_REPLIES).format(a=f"@{author}", i=rng.choice(interests), t=topic)
    if rng.random() < 0.25:
        mention = _mention(rng, social, exclude=(author,))
        if mention:
            text = f"{text} cc {mention}"
    return text


def _social_reply(request: CompletionRequest, rng: random.Random) -> str:
    social = _parse_social(request.prompt)
    me = social.name
    by_id = {post[0]: post for post in social.feed}
    others = [post for post in social.feed if post[1] != me]
    mentioned = sorted({m for m in social.mentions if m in by_id and by_id[m][1] != me})
    action, text, target = "idle", "", None
    draw = rng.random()
    if mentioned and draw < 0.8:
        post = by_id[rng.choice(mentioned)]
        action, text, target = "reply", _social_text_reply(rng, social, post), post[0]
    elif others:
        draw = rng.random()
        if draw < 0.35:
            action, text = "post", _social_text_post(rng, social)
        elif draw < 0.65:
            post = rng.choice(others)
            action, text, target = "reply", _social_text_reply(rng, social, post), post[0]
        elif draw < 0.82:
            action, target = "like", rng.choice(others)[0]
        elif draw < 0.87:
            whom = _mention(rng, social, exclude=(me,))
            if whom:
                action, text = "follow", whom
    elif rng.random() < 0.7:
        action, text = "post", _social_text_post(rng, social)
    return _REPLY_JSON({"action": action, "text": text, "target": target})


#: json.dumps(..., ensure_ascii=False), with one encoder for every reply.
_REPLY_JSON: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode


def _is_social(request: CompletionRequest) -> bool:
    return _SOCIAL_MARKER in request.prompt


def social_rules() -> list[ScriptedRule]:
    """The rules that answer the social prompt convention (see :func:`social_prompt`).

    A prompt containing ``TASK: choose one action`` gets a JSON object
    ``{"action": ..., "text": ..., "target": ...}``: with a mention in the
    feed, a reply to it (probability 0.8); otherwise a post (0.35), a reply to
    a feed post (0.30), a like (0.17), a follow of an ``@name`` from AGENTS
    (0.05, ``text`` is the name) or idle (0.13). Posts and replies are
    template sentences built from the persona's interests, and often mention
    one or two ``@names`` from AGENTS (a reply starts with its target's
    author). ``target`` is a post id from the FEED, by another agent, for a
    reply or like, and ``null`` otherwise.
    """
    return [ScriptedRule("social", _is_social, _social_reply)]


def parse_social_action(text: str) -> dict[str, Any]:
    """Parse a model's reply in the social convention into ``{"action", "text", "target"}``.

    Tolerant of what real models add: surrounding prose or a Markdown code
    fence around the JSON object, a missing ``text`` (becomes "") or
    ``target`` (becomes ``None``).

    Raises:
        ConfigError: No JSON object, an unknown action, or a target that is
            not an int (for reply and like, a target is required).
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ConfigError(f"social reply must hold a JSON object, got {text[:120]!r}")
    try:
        data = json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or nested too deep
        raise ConfigError(f"social reply is not valid JSON ({exc}): {text[:120]!r}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"social reply must be a JSON object, got {data!r}")
    action = data.get("action")
    if action not in SOCIAL_ACTIONS:
        raise ConfigError(f"social reply action must be one of {SOCIAL_ACTIONS}, got {action!r}")
    body = data.get("text") or ""
    if not isinstance(body, str):
        raise ConfigError(f"social reply text must be a str, got {body!r}")
    target = data.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, int)):
        digits = target.lstrip("#") if isinstance(target, str) else ""
        # ASCII digits only: str.isdigit() also accepts "²" or "٣", which int() refuses.
        if digits.isascii() and digits.isdigit():
            target = int(digits)
        else:
            raise ConfigError(f"social reply target must be an int or null, got {target!r}")
    if action in ("reply", "like") and target is None:
        raise ConfigError(f"social reply action {action!r} needs a target post id, got null")
    return {"action": action, "text": body, "target": target}


# -- JSON schema and tool rules ------------------------------------------------

_WORDS = (
    "alpha",
    "bravo",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "harbor",
    "iris",
    "juniper",
)


def example_for_schema(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """Return a value that follows the JSON *schema* (a common subset), drawn from *rng*.

    Understands ``const``, ``enum``, ``anyOf``/``oneOf``, ``type`` (one or a
    list) with ``object`` (every property, in sorted order), ``array``
    (``items``, ``minItems``), ``string``, ``integer``/``number``
    (``minimum``/``maximum``), ``boolean`` and ``null``.
    """
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return example_for_schema(options[0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            return {}
        return {k: example_for_schema(properties[k], rng, depth + 1) for k in sorted(properties)}
    if kind == "array":
        count = int(schema.get("minItems", rng.randint(1, 3)))
        return [example_for_schema(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind == "integer":
        low, high = int(schema.get("minimum", 0)), int(schema.get("maximum", 100))
        return rng.randint(low, max(low, high))
    if kind == "number":
        lower, upper = float(schema.get("minimum", 0.0)), float(schema.get("maximum", 100.0))
        return round(rng.uniform(lower, max(lower, upper)), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))


def _wants_schema(request: CompletionRequest) -> bool:
    return request.response_schema_json is not None


def _schema_reply(request: CompletionRequest, rng: random.Random) -> str:
    return canonical_json(example_for_schema(request.response_schema, rng))


def _wants_tool(request: CompletionRequest) -> bool:
    return bool(request.tools) and request.messages[-1].role != "tool"


def _tool_reply(request: CompletionRequest, rng: random.Random) -> Completion:
    tool = rng.choice(request.tools)
    arguments = canonical_json(example_for_schema(tool.parameters, rng) or {})
    call = ToolCall(f"call_{rng.getrandbits(64):016x}", tool.name, arguments)
    return Completion(
        "",
        (call,),
        prompt_tokens=_prompt_tokens(request),
        completion_tokens=approx_tokens(arguments) + 3,
        finish_reason="tool_calls",
        model=request.model,
        metadata_json=canonical_json({"provider": "scripted", "rule": "tool"}),
    )


def default_rules() -> list[ScriptedRule]:
    """The rules of ``ScriptedModel()``: :func:`social_rules`, then JSON schema, then tools.

    A request with a ``response_schema_json`` gets canonical JSON that follows
    the schema; a request with tools whose last message is not a tool result
    gets one tool call with arguments that follow the tool's schema.
    """
    return [
        *social_rules(),
        ScriptedRule("json_schema", _wants_schema, _schema_reply),
        ScriptedRule("tool", _wants_tool, _tool_reply),
    ]


# -- the generic fallback ------------------------------------------------------

_OPENERS = (
    "Here is a thought on {k}:",
    "Good question about {k}.",
    "Thinking about {k},",
    "On {k}:",
    "Regarding {k},",
    "As for {k},",
)
_BODIES = (
    "it depends on the details, but the simple answer usually wins.",
    "I would start small and see where it leads.",
    "there are two sides, and both have a point.",
    "the evidence so far points one way, with some doubt left.",
    "most people overthink it; try it and learn.",
    "a careful plan beats a fast one here.",
    "history suggests patience pays off.",
    "I am not certain, yet I lean towards yes.",
)
_CLOSERS = (
    "",
    "Hope that helps.",
    "Happy to say more.",
    "That is my take, anyway.",
    "Let me know what you think.",
)


def _generic_reply(request: CompletionRequest, rng: random.Random) -> str:
    last: ChatMessage = request.messages[-1]
    if last.role == "tool":
        return f"The tool returned: {_clean_line(last.content)[:200]}"
    words = _WORD_RE.findall(request.prompt)
    keyword = rng.choice(words).lower() if words else "that"
    parts = [rng.choice(_OPENERS).format(k=keyword), rng.choice(_BODIES)]
    if rng.random() < 0.5:
        parts.append(rng.choice(_BODIES).capitalize())
    parts.append(rng.choice(_CLOSERS))
    return " ".join(p for p in parts if p)
