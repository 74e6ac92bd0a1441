"""A deterministic design-time responder: valid, grounded scenario JSON with no model at all.

:func:`scenario_rules` gives a :class:`~simulacra.llm.ScriptedModel` a rule
that answers the prompts of :func:`generate_scenarios`: it reads the knob
declarations and the passages back from the prompt, pairs a passage with the
knob whose name and description share the most words with it, and proposes
an intervention on that knob (a bool flipped, a number halved or stepped,
another choice) with a quote copied from the passage. It grounds each value
and time as the prompt asks: in the words of its quote that state it, where
the invented value happens to be one of them, else as an assumption that
says the value was invented. Its reply is a pure
function of the seed and the request, like every scripted reply, so
``simulacra scenarios generate ... --provider scripted`` works offline, with
no server and no key, and gives the same artifacts every time. It stands in
for a language model in demos and tests; it understands nothing.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from simulacra.llm import CompletionRequest, ScriptedModel, ScriptedRule, default_rules

from ._documents import normalize_space
from ._generate import GENERATE_TASK, KNOBS_HEADER, PASSAGES_HEADER, REPLY_HEADER
from ._grounding import OFF_WORDS, ON_WORDS, find_quantities, grounds
from ._schema import canonical_json

__all__ = ["scenario_rules", "scripted_scenario_model"]

_ID_LINE = re.compile(r"^\[(.+#\d+-\d+:[0-9a-f]{12})\]$")
_WORD = re.compile(r"[a-z]{4,}")


def _prompt(request: CompletionRequest) -> str | None:
    for message in request.messages:
        if message.role == "user" and message.content.startswith(GENERATE_TASK):
            return message.content
    return None


def _wants_scenario(request: CompletionRequest) -> bool:
    return _prompt(request) is not None


def _sections(prompt: str) -> tuple[dict[str, str], list[dict[str, Any]], list[tuple[str, str]]]:
    """The header fields, the knob declarations and the ``(id, text)`` passages of a prompt."""
    fields: dict[str, str] = {}
    knobs: list[dict[str, Any]] = []
    passages: list[tuple[str, list[str]]] = []
    part = "head"
    for line in prompt.split("\n"):
        if line in (KNOBS_HEADER, PASSAGES_HEADER, REPLY_HEADER):
            part = {KNOBS_HEADER: "knobs", PASSAGES_HEADER: "passages"}.get(line, "reply")
            continue
        if part == "head":
            key, _, value = line.partition(": ")
            fields[key] = value
        elif part == "knobs" and line.strip():
            knobs.append(json.loads(line))
        elif part == "passages":
            found = _ID_LINE.match(line)
            if found:
                passages.append((found.group(1), []))
            elif passages:
                passages[-1][1].append(line)
    return fields, knobs, [(pid, "\n".join(text).strip()) for pid, text in passages]


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


#: Words that make the responder move a number up rather than down.
_UP = frozenset({"twice", "double", "doubles", "doubled", "longer", "grows", "increase",
                 "increases", "more", "rises", "surge", "surges", "peak", "triple"})
#: ...and down rather than up (the words of the quote decide, the more numerous winning).
_DOWN = frozenset({"half", "halves", "halved", "reduce", "reduces", "reduced", "derate",
                   "derates", "derated", "derating", "fewer", "closed", "closes", "down",
                   "fails", "failed", "slower", "lower", "drops", "less", "outage"})


def _value(knob: dict[str, Any], up: bool) -> Any:
    """A value other than the default, within the knob's range and choices, where one exists.

    A bool is flipped, a number doubled or halved (an int stepped) as *up* says.
    """
    default, low, high = knob["default"], knob.get("low"), knob.get("high")
    if knob.get("choices"):
        return next((c for c in reversed(knob["choices"]) if c != default), default)
    if knob["type"] == "bool":
        return not default
    if knob["type"] == "str":
        return default

    def fits(v: float) -> bool:
        return bool((low is None or v >= low) and (high is None or v <= high) and v != default)

    if knob["type"] == "int":
        steps = (default + 1, default - 1) if up else (default - 1, default + 1)
        return next((v for v in steps if fits(v)), default)
    scaled = (round(default * 2, 6), round(default * 0.5, 6))
    for v in (scaled if up else scaled[::-1]) + (float(low or 0.0) + 1.0,):
        if fits(v):
            return float(v)
    return float(default)


def _pick(pairs: list[tuple[int, int, int]], index: int) -> tuple[int, int]:
    """The (passage, knob) of scenario *index*: the best pair whose knob and passage are new.

    Scenarios 0 .. index-1 are picked again first, so each call picks alike.
    """
    used_p: set[int] = set()
    used_k: set[int] = set()
    chosen = (pairs[0][1], pairs[0][2])
    for j in range(index + 1):
        found: tuple[int, int] | None = None
        for fresh_passage, fresh_knob in ((True, True), (False, True), (True, False)):
            found = next(((p, k) for _, p, k in pairs
                          if (not fresh_passage or p not in used_p)
                          and (not fresh_knob or k not in used_k)), None)
            if found is not None:
                break
        chosen = found if found is not None else (pairs[j % len(pairs)][1],
                                                  pairs[j % len(pairs)][2])
        used_p.add(chosen[0])
        used_k.add(chosen[1])
    return chosen


#: Why a value the scripted responder chose is what it is, when its quote does not state it.
_INVENTED = ("invented by the scripted stand-in model, which reads no numbers from the "
             "documents (use the default extract provider or a language model)")


def _ground(value: Any, quote: str, field: str) -> dict[str, Any]:
    """Where *value* comes from: the words of *quote* that state it, or an assumption."""
    words: str | None = None
    if isinstance(value, bool):
        wanted = OFF_WORDS if value is False else ON_WORDS
        words = next((m.group() for m in re.finditer(r"[A-Za-z][A-Za-z-]*", quote)
                      if m.group().lower() in wanted), None)
    elif isinstance(value, str):
        words = value if grounds(value, quote, field=field) else None
    else:
        words = next((q.text for q in find_quantities(quote)
                      if grounds(value, q.text, field=field)), None)
        if words is None and grounds(value, quote, field=field):
            words = quote  # a window between two of its times
    if words is None:
        return {"assumption": _INVENTED}
    return {"citation": 0, "text": words}


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", text.lower())).strip("-")


def _scenario_reply(request: CompletionRequest, rng: random.Random) -> str:
    prompt = _prompt(request) or ""  # the predicate held: there is one
    fields, knobs, passages = _sections(prompt)
    index = int(fields.get("SCENARIO", "1").split()[0]) - 1
    until_text = re.search(r"from 0 to ([0-9.eE+-]+)", fields.get("TIME", ""))
    until = float(until_text.group(1)) if until_text else None
    pairs = []
    for p_index, (_, text) in enumerate(passages):
        found = _words(text)
        for k_index, knob in enumerate(knobs):
            tokens = _words(knob["name"].replace("_", " ") + " " + knob.get("doc", ""))
            pairs.append((-len(found & tokens), p_index, k_index))
    pairs.sort()
    p_index, k_index = _pick(pairs, index)
    pid, text = passages[p_index]
    knob = knobs[k_index]
    tokens = _words(knob["name"].replace("_", " ") + " " + knob.get("doc", ""))
    words = [w for w in normalize_space(text).split(" ") if w]
    hit = next((i for i, w in enumerate(words) if _words(w) & tokens), 0)
    start = max(0, hit - 3)
    while start < len(words) - 1 and set(words[start]) <= set("#*->"):
        start += 1
    quote = " ".join(words[start:start + 12])
    if until is not None:
        at = round(until * (0.1 + 0.3 * rng.random()), 1)
        duration = round(until * 0.25, 1)
    else:
        at = float(rng.choice((10, 20, 30, 60)))
        duration = 60.0
    said = _WORD.findall(quote.lower())
    value = _value(knob, up=sum(w in _UP for w in said) > sum(w in _DOWN for w in said))
    topic = [w for w in _WORD.findall(text.lower()) if w not in tokens][:2]
    name = _slug("-".join([knob["name"], *topic]))[:50].strip("-") + f"-{index + 1}"
    file = pid.rpartition("#")[0]
    intervention: dict[str, Any] = {"knob": knob["name"], "at": at, "value": value,
                                    "duration": duration, "note": f"grounded in {pid}"}
    description = f"{knob['name']} becomes {value!r} at {at} for {duration}"
    if knob.get("action"):  # acts once: no duration; a text takes the quoted words
        del intervention["duration"]
        if knob["type"] == "str":
            intervention["value"] = value = quote
        description = f"{knob['name']} {value!r} at {at}"
    intervention["grounding"] = {field: _ground(intervention[field], quote, field)
                                 for field in ("value", "at", "duration")
                                 if field in intervention}
    reply = {
        "name": name,
        "description": f"{description}, as {file} describes (scripted).",
        "interventions": [intervention],
        "citations": [{"passage": pid, "quote": quote}],
    }
    return canonical_json(reply)


def scenario_rules() -> list[ScriptedRule]:
    """The rule that answers scenario-generation prompts (``"scenario"``), as a list."""
    return [ScriptedRule("scenario", _wants_scenario, _scenario_reply)]


def scripted_scenario_model(seed: int | str | bytes = 0) -> ScriptedModel:
    """A :class:`~simulacra.llm.ScriptedModel` that answers scenario prompts (then the defaults)."""
    return ScriptedModel(seed, rules=[*scenario_rules(), *default_rules()])
