"""Record and replay: a run recorded from a real HTTP server replays exactly with zero calls."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from simulacra.errors import ConfigError, RecordingError, ReplayMiss
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    OpenAICompatible,
    RecordingModel,
    RecordingStore,
    ReplayModel,
    ScriptedModel,
    ScriptedServer,
    model_from_config,
    social_prompt,
)

pytestmark = pytest.mark.timeout(60)


def _calls(agents: int, turns: int) -> list[tuple[CompletionRequest, CallSite]]:
    handles = [f"agent{i}" for i in range(agents)]
    out = []
    for n in range(turns):
        for i, me in enumerate(handles):
            feed = [(k, handles[k % agents], f"post {k} about bread") for k in range(n)]
            prompt = social_prompt(
                me,
                interests=["bread", f"topic{i}"],
                agents=[h for h in handles if h != me],
                feed=feed,
                mentions=[n - 1] if n and i % 3 == 0 else [],
            )
            out.append((CompletionRequest.chat(prompt), CallSite(me, n)))
    return out


def test_record_then_replay_makes_zero_calls(tmp_path: Path) -> None:
    calls = _calls(agents=6, turns=4)
    path = tmp_path / "run" / "recordings.sqlite"
    with ScriptedServer(seed=3, latency=(0.0, 0.01)) as server:
        with (
            OpenAICompatible(server.base_url, "scripted", api_key_env=None) as client,
            RecordingStore(path) as store,
        ):
            recorder = RecordingModel(client, store)
            with ThreadPoolExecutor(max_workers=8) as pool:
                recorded = list(pool.map(lambda c: recorder.complete(c[0], site=c[1]), calls))
            assert len(store) == len(calls)
            assert recorder.recorded == len(calls)
        assert server.calls == len(calls)

        # Replay, in reverse order, from a read-only store: the same completions, no calls.
        with RecordingStore(path, readonly=True) as store:
            replay = ReplayModel(store)
            replayed = [replay.complete(q, site=s) for q, s in reversed(calls)][::-1]

            async def main() -> list[Completion]:
                return list(await asyncio.gather(*(replay.acomplete(q, site=s) for q, s in calls)))

            replayed_async = asyncio.run(main())
            assert replay.calls_served == 2 * len(calls)
            assert replay.misses == 0
        assert server.calls == len(calls)  # not one more
    assert replayed == recorded
    assert replayed_async == recorded
    # and the recordings equal what the scripted model gives in process
    local = ScriptedModel(seed=3)
    assert [c.text for c in recorded] == [local.complete(q, site=s).text for q, s in calls]


def test_strict_replay_miss_names_the_call_site_and_key(tmp_path: Path) -> None:
    with RecordingStore(tmp_path / "rec.sqlite") as store:
        recorder = RecordingModel(ScriptedModel(), store)
        recorded = CompletionRequest.chat("the old prompt")
        recorder.complete(recorded, site=CallSite("alice", 0))
        replay = ReplayModel(store, strict=True)

        changed = CompletionRequest.chat("the new prompt")
        with pytest.raises(ReplayMiss) as info:
            replay.complete(changed, site=CallSite("alice", 0))
        message = str(info.value)
        assert "call site agent='alice' n=0" in message
        assert changed.key() in message
        assert "different request" in message
        assert (info.value.site, info.value.request_key) == ("alice/0", changed.key())
        assert isinstance(info.value, LookupError)

        with pytest.raises(ReplayMiss, match="other call sites") as elsewhere:
            replay.complete(recorded, site=CallSite("bob", 4))
        assert "agent='bob' n=4" in str(elsewhere.value)
        assert replay.misses == 2
        assert replay.calls_served == 0


def test_lenient_replay_uses_other_sites_then_the_fallback(tmp_path: Path) -> None:
    with RecordingStore(tmp_path / "rec.sqlite") as store:
        original = CompletionRequest.chat("hello")
        first = RecordingModel(ScriptedModel(1), store).complete(original, site=CallSite("a", 0))
        fallback = ScriptedModel(2)
        replay = ReplayModel(store, strict=False, fallback=fallback)
        assert replay.complete(original, site=CallSite("b", 9)) == first
        other = CompletionRequest.chat("never recorded")
        assert replay.complete(other, site=CallSite("a", 0)) == fallback.complete(
            other, site=CallSite("a", 0)
        )
        assert (replay.calls_served, replay.misses) == (1, 2)
        with pytest.raises(ConfigError, match="strict=True"):
            ReplayModel(store, strict=True, fallback=fallback)
        with pytest.raises(ReplayMiss):
            ReplayModel(store, strict=False).complete(other)


def test_recording_model_reuse_resumes_without_calling_again(tmp_path: Path) -> None:
    calls = _calls(agents=3, turns=2)
    with (
        ScriptedServer() as server,
        OpenAICompatible(server.base_url, "scripted", api_key_env=None) as client,
        RecordingStore(tmp_path / "r.sqlite") as store,
    ):
        half = len(calls) // 2
        for q, s in calls[:half]:
            RecordingModel(client, store).complete(q, site=s)
        resumed = RecordingModel(client, store, reuse=True)
        for q, s in calls:
            resumed.complete(q, site=s)
        assert server.calls == len(calls)
        assert (resumed.reused, resumed.recorded) == (half, len(calls) - half)


def test_store_contents_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    request = CompletionRequest.chat("x")
    completion = Completion("y", prompt_tokens=3, completion_tokens=2, metadata_json='{"a":1}')
    with RecordingStore(path) as store:
        store.put(request.key(), CallSite("a", 1), completion, request=request)
        store.put(request.key(), None, completion)
        assert (request.key(), CallSite("a", 1)) in store
        assert (request.key(), CallSite("a", 2)) not in store
        assert list(store) == [(request.key(), None), (request.key(), CallSite("a", 1))]
    with RecordingStore(path) as store:
        assert len(store) == 2
        assert store.get(request.key(), CallSite("a", 1)) == completion
        assert store.get(request.key(), None) == completion
        assert store.request(request.key()) == request
        assert store.sites_for(request.key()) == [None, CallSite("a", 1)]
    with (
        RecordingStore(path, readonly=True) as store,
        pytest.raises(RecordingError, match="read-only"),
    ):
        store.put(request.key(), None, completion)
    store.close()
    with pytest.raises(RecordingError, match="closed"):
        len(store)


def test_store_refuses_foreign_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(RecordingError, match="not a recording store"):
        RecordingStore(junk)
    other = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as db, db:  # close, not only commit
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('format', 'someone.else.v9')")
    with pytest.raises(RecordingError, match=r"someone\.else\.v9"):
        RecordingStore(other)
    with pytest.raises(RecordingError, match="does not exist"):
        RecordingStore(tmp_path / "missing.sqlite", readonly=True)


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    calls = _calls(agents=10, turns=3)
    with RecordingStore(tmp_path / "t.sqlite") as store:
        recorder = RecordingModel(ScriptedModel(), store)
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda c: recorder.complete(c[0], site=c[1]), calls))
        assert len(store) == len(calls)


def test_replay_provider_from_config(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    request = CompletionRequest.chat("hello")
    with RecordingStore(path) as store:
        expected = RecordingModel(ScriptedModel(), store).complete(request, site=CallSite("a", 0))
    replay = model_from_config({"provider": "replay", "path": str(path)})
    assert isinstance(replay, ReplayModel)
    assert replay.complete(request, site=CallSite("a", 0)) == expected
    replay.store.close()
