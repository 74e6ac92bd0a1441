"""A held store (a society run's) keeps short texts as they are; every store reads both codecs."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from simulacra.llm import CallSite, Completion, CompletionRequest, RecordingStore, canonical_json
from simulacra.llm._record import _DEFLATE, _HELD_RAW, _RAW

SYSTEM = "Be brief. Stay in character, and answer with the JSON the task asks for."
SHORT = "You are @alice. FEED: #1 @bob: bread and jazz, bread and jazz, bread and jazz."
LONG = " ".join(f"#{i} @bob{i % 7}: a post about bread and jazz number {i}" for i in range(200))


def _codecs(path: Path) -> dict[bytes, int]:
    """The codec of each blob, by its text (inflated)."""
    from simulacra.llm._record import _unpack

    with contextlib.closing(sqlite3.connect(path)) as db:
        return {_unpack(codec, data): int(codec)
                for codec, data in db.execute("SELECT codec, data FROM blobs")}


def _write(path: Path, *, held: bool) -> list[tuple[CompletionRequest, Completion]]:
    calls = [(CompletionRequest.chat(text, system=SYSTEM, temperature=0.7),
              Completion(text[:400] + " reply", prompt_tokens=3, model="scripted"))
             for text in (SHORT, LONG)]
    with RecordingStore(path) as store:
        if held:
            store.hold()
        for n, (request, completion) in enumerate(calls):
            store.put(request.key(), CallSite("alice", n), completion, request=request)
        if held:
            assert store.commit() == 2
    return calls


def _message(text: str) -> bytes:
    return canonical_json({"content": text, "role": "user"}).encode()


def test_a_held_store_keeps_short_texts_raw_and_deflates_long_ones(tmp_path: Path) -> None:
    assert len(_message(LONG)) >= _HELD_RAW > len(_message(SHORT))
    held, plain = tmp_path / "held.sqlite", tmp_path / "plain.sqlite"
    calls = _write(held, held=True)
    _write(plain, held=False)
    assert _codecs(held)[_message(SHORT)] == _RAW
    assert _codecs(held)[_message(LONG)] == _DEFLATE
    assert _codecs(plain)[_message(SHORT)] == _DEFLATE  # a store not held deflates as before
    assert set(_codecs(held)) == set(_codecs(plain))  # the same texts
    for path in (held, plain):
        with RecordingStore(path, readonly=True) as store:
            for n, (request, completion) in enumerate(calls):
                assert store.get(request.key(), CallSite("alice", n)) == completion
                assert store.request(request.key()) == request
            assert store.request_messages([calls[0][0].key()]) == {
                calls[0][0].key(): (("system", SYSTEM), ("user", SHORT))}


def test_a_store_written_both_ways_reads_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    first = _write(path, held=False)
    with RecordingStore(path) as store:  # a resumed run: held, the same texts again
        store.hold()
        for n, (request, completion) in enumerate(first):
            store.put(request.key(), CallSite("bob", n), completion, request=request)
    with RecordingStore(path, readonly=True) as store:
        assert len(store) == 4
        for agent in ("alice", "bob"):
            for n, (request, completion) in enumerate(first):
                assert store.get(request.key(), CallSite(agent, n)) == completion
