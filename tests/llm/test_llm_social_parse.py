"""``social_prompt`` remembers what the scripted model will read back from its prompt.

The entry must be exactly what reading the text gives (``_read_social``),
whatever the parts: odd handles, commas, negative ids, line breaks, headers
inside texts. Where a part would not read back as given, no entry is made
and the text is read.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.llm import CallSite, CompletionRequest, ScriptedModel, _scripted, social_prompt

PIECES = st.sampled_from(["a", "bob", "x.y", "-", ".", ",", " ", "\n", "\t", "#", "#3", "@",
                          "Interests:", "FEED:", "\nFEED:", "AGENTS:", "MENTIONS:", "TASK:",
                          "(reply to #2)", ": ", "é", "٣", "ß", "\u2028", "none", "!"])
TEXT = st.lists(PIECES, max_size=6).map("".join) | st.text(max_size=12)
HANDLE = st.sampled_from(["alice", "bob", "c.d", "e-f", "g_h", "ünï", "x1"])
AUTHOR = HANDLE | TEXT.filter(bool)
ID = st.integers(-3, 50)
FEED_ITEM = (st.tuples(ID, AUTHOR, TEXT) | st.tuples(ID, AUTHOR, TEXT, st.none() | ID)
             | st.builds(lambda i, a, t, r: {"id": i, "author": a, "text": t, "reply_to": r},
                         ID, AUTHOR, TEXT, st.none() | ID))


PARTS = st.fixed_dictionaries({
    "persona": TEXT, "interests": st.lists(TEXT, max_size=4),
    "agents": st.lists(AUTHOR, max_size=5), "feed": st.lists(FEED_ITEM, max_size=6),
    "mentions": st.lists(ID, max_size=3)})


@settings(max_examples=500, deadline=None)
@given(HANDLE, PARTS)
def test_the_remembered_reading_is_the_reading_of_the_text(name: str,
                                                           parts: dict[str, object]) -> None:
    _scripted._PARSED.clear()
    prompt = social_prompt(name, **parts)  # type: ignore[arg-type]
    remembered = _scripted._PARSED.get(prompt)
    read = _scripted._read_social(prompt)
    if remembered is not None:
        assert remembered == read
    assert _scripted._parse_social(prompt) == read
    assert prompt not in _scripted._PARSED  # taken by the first reading


def test_plain_social_prompts_are_remembered_and_taken_once() -> None:
    _scripted._PARSED.clear()
    feed = [(1, "bob", "hello @alice", None), (2, "carol", "chess, anyone?", 1)]
    prompt = social_prompt("alice", persona="baker", interests=["bread", "chess"],
                           agents=["bob", "carol"], feed=feed, mentions=[1])
    assert prompt in _scripted._PARSED
    model = ScriptedModel(seed=3)
    request = CompletionRequest.chat(prompt)
    first = model.complete(request, site=CallSite("alice", 0))
    assert prompt not in _scripted._PARSED
    # read from the text this time: the same reply
    assert model.complete(request, site=CallSite("alice", 0)) == first
    # an entry that disagreed with the text would change the reply: the entry is what is used
    social_prompt("alice", persona="baker", interests=["bread", "chess"],
                  agents=["bob", "carol"], feed=feed, mentions=[1])
    _scripted._PARSED[prompt] = _scripted._PARSED[prompt].__class__(
        "alice", ("bread",), " @bob @carol", [], ())
    assert model.complete(request, site=CallSite("alice", 0)) != first
