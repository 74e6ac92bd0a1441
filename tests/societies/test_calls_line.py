"""A call's line of calls.jsonl, written straight, is the JSON the record dict encodes to."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.llm import CallSite, Completion, CompletionRequest
from simulacra.societies._calls import _ENCODE, CallLog

AGENT = st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF,
                              exclude_categories=("Cs",)), min_size=1, max_size=12)
NUMBER = st.integers(-10, 10**9) | st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(AGENT, st.integers(0, 10**6), st.tuples(NUMBER, NUMBER, NUMBER),
       st.floats(0, 1e4), st.floats(0, 1e4), st.integers(0, 10**7), st.integers(0, 10**7),
       st.integers(0, 5), st.sampled_from([0.0, 1.5, 3e-7]))
def test_the_straight_line_is_the_encoded_record(  # noqa: PLR0917
        agent: str, n: int, where: tuple[float, float, float], wall: float, since: float,
        prompt: int, done: int, session: int, rate: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "calls.jsonl"
        log = CallLog(path, session=session, price=lambda p, c: (p + c) * rate)
        log.context = lambda _agent: where
        site = CallSite(agent, n)
        request = CompletionRequest.chat(f"hello {agent}")
        completion = Completion("hi", prompt_tokens=prompt, completion_tokens=done)
        started = log._start + since
        log.done(request, site, completion, wall, started)
        log.close()
        line = path.read_text(encoding="utf-8")
    record = log._head(site, wall, started)
    record.update(prompt_tokens=prompt, completion_tokens=done,
                  cost=round(log.price(prompt, done), 12), ok=True, key=request.key(),
                  session=session)
    assert line == _ENCODE(record) + "\n"
    assert json.loads(line)["agent"] == agent
