"""The default generator: a deterministic reader that grounds every value it proposes.

:func:`extract_scenarios` reads each passage sentence by sentence with the
parser of :mod:`._grounding` (numbers and number words with their units,
rates, durations, clock times, virtual times and their ranges, and words that
switch a thing off or on), pairs what it reads with the target's knobs by
name, unit and range, and proposes one scenario per passage that holds at
least one such change. Every value and time it writes is grounded: its
``grounding`` names the citation and the words of the quote that state it, or,
for a start time no passage states, says that it was assumed and why. What it
cannot ground it leaves out, and says so in a note. It calls no model: the
same documents and knobs give the same artifacts every time.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from simulacra.errors import ScenarioError

from ._documents import Document, Passage, normalize_space
from ._grounding import TIME_UNITS, Quantity, candidates, find_quantities, switch_words
from ._knobs import Knob, Knobs
from ._schema import Scenario

__all__ = ["EXTRACTOR", "extract_scenarios", "passage_changes"]

#: The ``provenance.generator`` of the scenarios :func:`extract_scenarios` makes.
EXTRACTOR: Final = "simulacra.scenarios.extract.v1"

_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_WORD = re.compile(r"[a-z0-9]+")
#: Name parts that say nothing about what a knob is.
_GENERIC: Final = frozenset({"up", "on", "is", "open", "available", "working", "enabled",
                             "rate", "size", "count", "number", "level", "the", "of"})
_TIME_OF_DAY: Final = "clock"
_NO_START: Final = ("the passage states no start time; assumed from the start of the run "
                    "(t=0)")


def _stem(word: str) -> str:
    word = word.lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _mentioned(knob: Knob, words: list[str]) -> bool:
    """Whether the sentence's *words* name *knob* (all of its name's telling parts)."""
    parts = [p for p in knob.name.lower().split("_") if p and p not in _GENERIC]
    if not parts:
        return False
    stems = {_stem(w) for w in words}
    prefixes = {w[:5] for w in stems if len(w) >= 5}
    return all(_stem(p) in stems or (len(p) >= 5 and p[:5] in prefixes) for p in parts)


def _unit_kind(unit: str) -> str:
    """A knob unit's kind: ``per_hour``, ``percent``, a time unit, or ``""``."""
    text = unit.lower()
    if re.search(r"(/\s*h(our|r)?\b|per\s+hour)", text):
        return "per_hour"
    if "%" in text or "percent" in text:
        return "percent"
    for word, kind in (("minute", "minute"), ("hour", "hour"), ("second", "second")):
        if word in text:
            return kind
    return ""


def _multiplier(knob: Knob) -> bool:
    return knob.type == "float" and knob.default == 1.0 and "multiplier" in knob.doc.lower()


def _fits(knob: Knob, value: float) -> bool:
    if knob.type == "int" and value != int(value):
        return False
    return ((knob.low is None or value >= knob.low) and (knob.high is None or value <= knob.high)
            and value != knob.default)


def _numeric_value(knob: Knob, q: Quantity, words: list[str]) -> float | None:
    """The value *q* gives *knob*, or None when its unit or noun does not fit the knob."""
    if q.is_time and _unit_kind(knob.unit) not in TIME_UNITS:
        return None
    kind = _unit_kind(knob.unit)
    unit_words = {_stem(w) for w in _WORD.findall(knob.unit.lower())} - {"unit", "time"}
    name_words = {_stem(p) for p in knob.name.lower().split("_")}
    noun_words = {_stem(w) for w in q.noun.split()}
    value: float | None = None
    if kind and kind == q.unit:
        value = q.number
        if kind == "per_hour" and q.noun and unit_words and not noun_words & unit_words:
            value = None
    elif q.unit == "count" and noun_words & (unit_words | name_words):
        value = q.number
    elif q.unit == "percent" and _multiplier(knob) and _mentioned(knob, words):
        value = q.number / 100
    if value is None:
        return None
    if knob.type == "int":
        value = float(int(value)) if value == int(value) else value
    return value if _fits(knob, value) and value in candidates(q) else None


@dataclass(slots=True)
class _Window:
    at: tuple[float, Quantity] | None = None
    duration: tuple[float, str] | None = None  # the value and the words that state it
    used: set[int] = field(default_factory=set)  # the starts of the quantities it took


def _window(sentence: str, quantities: list[Quantity], time_unit: str) -> _Window:
    """The start and length of the change a sentence describes, in *time_unit* s."""
    scale = TIME_UNITS[time_unit]
    found = _Window()
    points = [q for q in quantities if q.unit in ("t", _TIME_OF_DAY)]
    if points:  # the first window "from A to B" (a later time of its kind), else A alone
        first, end = points[0], None
        for a, b in itertools.pairwise(points):
            if a.unit == b.unit and (b.number - a.number) % 1440.0 > 0:
                first, end = a, b
                break
        found.at = (first.number if first.unit == "t" else first.number / scale, first)
        found.used.add(first.start)
        if end is not None:
            gap = end.number - first.number
            if first.unit == _TIME_OF_DAY:
                gap = (gap + 1440.0) % 1440.0 / scale
            if gap > 0:
                found.duration = (gap, sentence[first.start:end.end])
                found.used.add(end.start)
    for q in quantities:
        if q.unit not in TIME_UNITS or q.start in found.used:
            continue
        value = q.number * TIME_UNITS[q.unit] / scale
        after = sentence[q.end:q.end + 7].lower()
        before = sentence[max(0, q.start - 8):q.start].lower()
        if found.duration is None and re.search(r"(for|lasted|lasting|of)\s$", before):
            found.duration = (value, q.text)
            found.used.add(q.start)
        elif found.at is None and (after.startswith((" into", " after", " in")) or
                                   before.endswith("after ")):
            found.at = (value, q)
            found.used.add(q.start)
    return found


@dataclass(frozen=True, slots=True)
class Change:
    """One grounded intervention, with the sentences it cites."""

    knob: str
    value: Any
    value_text: str
    sentence: str
    at: float | None
    at_text: str
    at_passage: Passage
    at_sentence: str
    duration: float | None
    duration_text: str
    duration_passage: Passage
    duration_sentence: str


def _windows(passage: Passage, time_unit: str) -> list[tuple[str, list[Quantity], _Window]]:
    sentences = [s for s in _SENTENCE.split(normalize_space(passage.text)) if s]
    out = []
    for sentence in sentences:
        quantities = find_quantities(sentence)
        out.append((sentence, quantities, _window(sentence, quantities, time_unit)))
    return out


def _first_window(passage: Passage, time_unit: str) -> tuple[str, _Window] | None:
    return next(((s, w) for s, _, w in _windows(passage, time_unit) if w.at is not None), None)


def passage_changes(passage: Passage, knobs: Knobs, *, time_unit: str = "minute",
                    until: float | None = None,
                    others: Sequence[Passage] = ()) -> tuple[list[Change], list[str]]:
    """The changes *passage* states for *knobs*, and a note for each thing it left out.

    A change takes its start and length from its own sentence, else from the
    first sentence of its passage that states a time, else from the first of
    *others* (the rest of its document) that does.
    """
    windows = _windows(passage, time_unit)
    found = next(((s, w) for s, _, w in windows if w.at is not None), None)
    passage_window = (passage, *found) if found is not None else None
    for other in others:
        if passage_window is not None:
            break
        found = _first_window(other, time_unit)
        passage_window = (other, *found) if found is not None else None
    changes: list[Change] = []
    notes: list[str] = []
    done: set[str] = set()
    for sentence, quantities, window in windows:
        words = _WORD.findall(sentence.lower())
        used = set(window.used)
        for knob in knobs.values():
            if knob.name in done or knob.action:
                continue
            value: Any = None
            value_text = ""
            if knob.type == "bool" and _mentioned(knob, words):
                off, on = switch_words(sentence)
                if off != on:
                    value = on
                    value_text = [w for w in re.findall(r"[A-Za-z][A-Za-z-]*", sentence)
                                  if switch_words(w) == (off, on)][-1]
                    if value == knob.default:
                        value = None
            elif knob.type == "str" and knob.choices:
                value = next((c for c in knob.choices if isinstance(c, str) and c != knob.default
                              and re.search(rf"\b{re.escape(c)}\b", sentence, re.IGNORECASE)
                              and _mentioned(knob, words)), None)
                value_text = value or ""
            elif knob.numeric and not (  # "two berths closed" is not how many are open
                    {"open", "up"} & set(knob.name.lower().split("_"))
                    and switch_words(sentence)[0]):
                for q in quantities:
                    if q.start in used:
                        continue
                    number = _numeric_value(knob, q, words)
                    if number is not None:
                        value = int(number) if knob.type == "int" else number
                        value_text = q.text
                        used.add(q.start)
                        break
            if value is None:
                continue
            at_passage = passage
            if window.at is not None:
                at_sentence, win = sentence, window
            elif passage_window is not None:
                at_passage, at_sentence, win = passage_window
            else:
                at_sentence, win = "", _Window()
            at = win.at[0] if win.at is not None else None
            if until is not None and at is not None and at > until:
                notes.append(f"{passage.id}: left out {knob.name} = {value!r} "
                             f"({value_text!r}): it starts at {at:g}, after --until {until:g}")
                continue
            done.add(knob.name)
            length, length_passage, length_sentence = win.duration, at_passage, at_sentence
            if window.duration is not None:  # "for two hours" here, the start elsewhere
                length, length_passage, length_sentence = window.duration, passage, sentence
            changes.append(Change(
                knob.name, value, value_text, sentence, at,
                win.at[1].text if win.at is not None else "", at_passage, at_sentence,
                length[0] if length is not None else None,
                length[1] if length is not None else "", length_passage, length_sentence))
        notes.extend(f"{passage.id}: left out {q.text!r}: no knob takes it (by name, unit "
                     "and range)" for q in quantities
                     if q.start not in used and not q.is_time and q.unit != "celsius")
    return changes, notes


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", text.lower())).strip("-")


def _scenario(passage: Passage, changes: list[Change], name: str, target: str) -> Scenario:
    quotes: list[tuple[Passage, str]] = []

    def cite(sentence: str, where: Passage = passage) -> int:
        if (where, sentence) not in quotes:
            quotes.append((where, sentence))
        return quotes.index((where, sentence))

    interventions = []
    for change in changes:
        grounding: dict[str, dict[str, Any]] = {
            "value": {"citation": cite(change.sentence), "text": change.value_text}}
        if change.at is not None:
            grounding["at"] = {"citation": cite(change.at_sentence, change.at_passage),
                              "text": change.at_text}
        else:
            grounding["at"] = {"assumption": _NO_START}
        item: dict[str, Any] = {"knob": change.knob, "at": change.at or 0.0,
                                "value": change.value, "grounding": grounding,
                                "note": f"{change.knob} = {change.value_text}"}
        if change.duration is not None:
            item["duration"] = change.duration
            grounding["duration"] = {"citation": cite(change.duration_sentence,
                                                      change.duration_passage),
                                     "text": change.duration_text}
        interventions.append(item)
    said = "; ".join(f"{c.knob} {c.value!r} at {c.at or 0.0:g}"
                     + (f" for {c.duration:g}" if c.duration is not None else "")
                     for c in changes)
    return Scenario(
        name=name, target=target,
        description=f"{said}, as {passage.file} states (extracted).",
        interventions=interventions,
        citations=[{"passage": where.id, "quote": quote} for where, quote in quotes],
        provenance={"generator": EXTRACTOR,
                    "passages": [{"id": p.id, "sha256": p.sha256}
                                 for p in dict.fromkeys(where for where, _ in quotes)]})


def extract_scenarios(documents: Sequence[Document], knobs: Knobs, *, target: str,
                      count: int | None = None, until: float | None = None,
                      time_unit: str = "minute") -> tuple[list[Scenario], list[str]]:
    """One grounded scenario per passage that states a change of a knob, and the notes.

    Args:
        documents: The source documents (:func:`read_documents`).
        knobs: The target model's knobs.
        target: How the target is named; each scenario's ``target``.
        count: The most scenarios to make (the first passages first); None: all.
        until: The end of the run: a change that starts after it is left out.
        time_unit: What one unit of virtual time is (``"minute"``, ``"hour"``,
            ``"second"`` or ``"day"``): clock times and durations are converted to it.

    Returns:
        The scenarios, in passage order, and one note per thing left out.

    Raises:
        ScenarioError: Nothing in the documents can be grounded on a knob
            (no scenario is made), or bad arguments.
    """
    if time_unit not in TIME_UNITS:
        raise ScenarioError(f"time_unit must be one of {', '.join(TIME_UNITS)}, got "
                            f"{time_unit!r}")
    scenarios: list[Scenario] = []
    notes: list[str] = []
    for document in documents:
        stem = _slug(document.file.rsplit("/", 1)[-1].rsplit(".", 1)[0])[:30].strip("-")
        passages = document.passages()
        for passage in passages:
            changes, left = passage_changes(passage, knobs, time_unit=time_unit, until=until,
                                            others=[p for p in passages if p != passage])
            notes.extend(left)
            if not changes:
                continue
            base = _slug(f"{stem}-{changes[0].knob}")[:58].strip("-")
            taken = {s.name for s in scenarios}
            name = next(n for n in (base, *(f"{base}-{i}" for i in range(2, 10_000)))
                        if n not in taken)
            scenarios.append(_scenario(passage, changes, name, target))
    if not scenarios:
        names = ", ".join(d.file for d in documents)
        raise ScenarioError(f"documents {names}: nothing to ground: no number, time or on/off "
                            f"event in them fits a knob of the target ({', '.join(knobs)}); "
                            "no scenario written")
    if count is not None and len(scenarios) > count:
        notes.extend(f"left out scenario {s.name!r}: --count {count} was reached"
                     for s in scenarios[count:])
        scenarios = scenarios[:count]
    return scenarios, notes
