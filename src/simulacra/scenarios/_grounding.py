"""Numbers in words: quantities, times and on/off events read from text, and their checks.

:func:`find_quantities` reads the numbers of a text with their units: digits
and number words (``"four"``), percentages (``"60 %"``, ``"60 percent"``),
rates (``"15 patients/h"``, ``"per hour"``), durations (``"four hours"``,
``"90 min"``), clock times (``"02:00"``), virtual times and their ranges
(``"t=180"``, ``"t=180-540"``, ``"from t=180 to t=540"``) and counts
(``"4 nurses"``). :func:`candidates` gives the values a quantity may stand
for once its unit is normalised (``60 %`` is 60 or 0.6; ``four hours`` is 4
hours or 240 minutes; ``02:00`` is 120 minutes or 2 hours), and a text that
holds two times of one kind also stands for their difference (a window's
length). :func:`grounds` decides whether a value is one of them.

The same reader serves the scripted extractor (which grounds every value it
proposes) and ``simulacra scenarios check`` (which re-reads the grounded text
inside its quote): a value that is not one of its text's numbers fails.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from ._documents import normalize_space

__all__ = ["OFF_WORDS", "ON_WORDS", "Quantity", "candidates", "find_quantities", "grounds",
           "switch_words"]

#: Number words read as numbers.
NUMBER_WORDS: Final[dict[str, int]] = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100,
}
#: Words that switch a thing off (a bool knob to False) ...
OFF_WORDS: Final = frozenset({"down", "offline", "off", "closed", "closes", "close", "fails",
                              "failed", "fail", "failure", "outage", "unavailable", "stopped",
                              "shut", "broken", "out-of-service"})
#: ... and on (to True).
ON_WORDS: Final = frozenset({"up", "online", "open", "opens", "opened", "reopened",
                             "reopens", "restored", "available", "working", "back"})

_NUM = r"(?:\d+(?:\.\d+)?|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
_UNIT_WORDS: Final[dict[str, str]] = {
    "%": "percent", "percent": "percent", "per cent": "percent",
    "minute": "minute", "minutes": "minute", "min": "minute", "mins": "minute",
    "hour": "hour", "hours": "hour", "h": "hour", "hr": "hour", "hrs": "hour",
    "second": "second", "seconds": "second", "sec": "second", "s": "second",
    "day": "day", "days": "day", "°c": "celsius",
}
#: Units that are lengths of time, in minutes.
TIME_UNITS: Final[dict[str, float]] = {"second": 1 / 60, "minute": 1.0, "hour": 60.0,
                                       "day": 1440.0}
#: Words after a number that do not say what it counts.
_NOT_NOUNS: Final = frozenset({
    "a", "an", "and", "or", "at", "to", "from", "of", "in", "into", "for", "on", "by", "the",
    "with", "until", "till", "after", "before", "then", "times", "is", "are", "was", "were",
    "more", "less", "than", "as", "per", "each", "every", "while", "when", "later"})
_CLOCK = re.compile(r"(?<![\d:])(?P<h>[01]?\d|2[0-3]):(?P<m>[0-5]\d)(?![\d:])")
_T = re.compile(r"\bt\s*=\s*(?P<a>\d+(?:\.\d+)?)(?:\s*(?:-|\u2013|to)\s*(?:t\s*=\s*)?"
                r"(?P<b>\d+(?:\.\d+)?)\b)?", re.IGNORECASE)
_RATE = re.compile(
    rf"\b(?P<n>{_NUM})\s*(?P<noun>[a-z]+)?\s*(?:/\s*(?:h|hr|hour)\b|per\s+hour\b|an\s+hour\b)",
    re.IGNORECASE)
_PLAIN = re.compile(
    rf"(?<![\w.:=-])(?P<n>{_NUM})(?![\w:])(?:\s*(?P<unit>%|°C|per cent|percent)|"
    rf"(?:\s+|-)(?P<word>[a-z]+(?:\s[a-z]+)?))?",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number read from a text.

    Attributes:
        text: Its words, as in the (whitespace-normalised) text.
        number: Its number as written (a clock time: minutes after midnight).
        unit: ``"percent"``, ``"per_hour"``, ``"minute"``, ``"hour"``,
            ``"second"``, ``"day"``, ``"clock"``, ``"t"`` (a virtual time),
            ``"celsius"``, ``"count"`` (a number of things: see *noun*) or "".
        noun: What is counted or rated (``"nurses"``, ``"patients"``), or "".
        start: Where it starts in the normalised text.
        end: Where it ends.
    """

    text: str
    number: float
    unit: str
    noun: str
    start: int
    end: int

    @property
    def is_time(self) -> bool:
        """Whether it is a clock time, a virtual time or a length of time."""
        return self.unit in ("clock", "t") or self.unit in TIME_UNITS


def _number(word: str) -> float:
    return float(NUMBER_WORDS.get(word.lower(), 0)) if word.lower() in NUMBER_WORDS \
        else float(word)


def find_quantities(text: str) -> list[Quantity]:
    """Every number of *text* with its unit, in the order they appear (text normalised)."""
    flat = normalize_space(text)
    found: list[Quantity] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    def add(q: Quantity, span: tuple[int, int]) -> None:
        found.append(q)
        taken.append(span)

    for m in _CLOCK.finditer(flat):
        add(Quantity(m.group(), int(m["h"]) * 60.0 + int(m["m"]), "clock", "", *m.span()),
            m.span())
    for m in _T.finditer(flat):
        if not free(*m.span()):
            continue
        taken.append(m.span())
        found.append(Quantity(flat[m.start():m.end("a")], float(m["a"]), "t", "", m.start(),
                              m.end("a")))
        if m["b"] is not None:
            found.append(Quantity(m["b"], float(m["b"]), "t", "", m.start("b"), m.end("b")))
    for m in _RATE.finditer(flat):
        if free(*m.span()):
            add(Quantity(m.group(), _number(m["n"]), "per_hour", (m["noun"] or "").lower(),
                         *m.span()), m.span())
    for m in _PLAIN.finditer(flat):
        if not free(m.start("n"), m.end("n")):
            continue
        unit, noun, end = "", "", m.end("n")
        if m["unit"]:
            unit, end = _UNIT_WORDS[m["unit"].lower()], m.end("unit")
        elif m["word"]:
            first = m["word"].split(" ")[0].lower()
            if first in _UNIT_WORDS:
                unit, end = _UNIT_WORDS[first], m.start("word") + len(first)
            else:
                kept = []
                for word in m["word"].lower().split(" "):
                    if word in _NOT_NOUNS or word in OFF_WORDS or word in ON_WORDS:
                        break
                    kept.append(word)
                    if word.endswith("s"):  # "6 pickers stayed": the plural is the noun
                        break
                if kept:
                    noun = " ".join(kept)
                    unit, end = "count", m.start("word") + len(noun)
        if not free(m.start("n"), end):
            end = m.end("n")
            unit, noun = ("", "") if unit != "percent" else (unit, noun)
        add(Quantity(flat[m.start("n"):end], _number(m["n"]), unit, noun, m.start("n"), end),
            (m.start("n"), end))
    return sorted(found, key=lambda q: q.start)


def candidates(quantity: Quantity) -> set[float]:
    """The values *quantity* may stand for, its unit normalised."""
    n = quantity.number
    if quantity.unit == "percent":
        return {n, n / 100}
    if quantity.unit in TIME_UNITS:  # in minutes or hours, as the model counts time
        minutes = n * TIME_UNITS[quantity.unit]
        return {n, minutes, minutes / 60}
    if quantity.unit == "clock":
        return {n, n / 60}
    if quantity.unit == "per_hour":
        return {n, n / 60}
    return {n}


def _spans(quantities: list[Quantity]) -> set[float]:
    """The lengths of the windows a text's times describe (the later minus the earlier)."""
    out: set[float] = set()
    kinds: dict[str, list[Quantity]] = {}
    for q in quantities:
        if q.unit in ("clock", "t"):
            kinds.setdefault(q.unit, []).append(q)
    for unit, items in kinds.items():
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                gap = b.number - a.number
                if unit == "clock" and gap < 0:
                    gap += 1440.0  # past midnight
                if gap > 0:
                    out |= {gap, gap / 60} if unit == "clock" else {gap}
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def switch_words(text: str) -> tuple[bool, bool]:
    """Whether *text* holds a word that switches something off, and one that switches it on."""
    words = set(re.findall(r"[a-z][a-z-]*", text.lower()))
    if "out of service" in text.lower():
        words.add("out-of-service")
    return bool(words & OFF_WORDS), bool(words & ON_WORDS)


def grounds(value: object, text: str, *, field: str = "value") -> bool:
    """Whether *text* states *value*: one of its numbers (units normalised), or its on/off word.

    A bool is grounded by a word that switches off (False) or on (True); a
    str by appearing in the text (whitespace aside); a number by being one of
    :func:`candidates` of a quantity of the text, or, for a ``duration``, the
    length of a window between two of its times.
    """
    if isinstance(value, bool):
        off, on = switch_words(text)
        return off if value is False else on
    if isinstance(value, str):
        return bool(normalize_space(value)) and normalize_space(value).lower() in \
            normalize_space(text).lower()
    if not isinstance(value, int | float):
        return False
    quantities = find_quantities(text)
    pool: set[float] = set()
    for q in quantities:
        pool |= candidates(q)
    if field in ("duration", "ramp"):
        pool |= _spans(quantities)
    return any(_close(float(value), c) for c in pool)
