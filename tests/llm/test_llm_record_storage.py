"""How the recording store keeps its calls: each text once, deflated, durable, and v1 files read.

Real SQLite files throughout (no mocks). ``data/recordings-v1.sqlite`` was
written by ``RecordingStore`` of the v1 layout (commit a003d8d) with
``ScriptedModel(seed=5)``; :func:`_v1_calls` rebuilds what it holds.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulacra.errors import ConfigError, RateLimited, RecordingError
from simulacra.llm import (
    STORE_FORMAT,
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    RecordingModel,
    RecordingStore,
    ReplayModel,
    ScriptedModel,
    ToolCall,
)
from simulacra.llm._record import _DEFLATE, _RAW, _ZDICT, _pack, _unpack

pytestmark = pytest.mark.timeout(120)

DATA = Path(__file__).resolve().parent / "data"
V1_FILE = DATA / "recordings-v1.sqlite"
SRC = Path(__file__).resolve().parents[2] / "src"

SYSTEM = "Be brief. Stay in character, and answer with the JSON the task asks for."


def _blobs(path: Path) -> list[bytes]:
    """Every blob the store at *path* holds, inflated."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [_unpack(codec, data) for codec, data in db.execute("SELECT codec, data FROM blobs")]


def _encoded(message: ChatMessage) -> bytes:
    from simulacra.llm import canonical_json

    return canonical_json(message.to_dict()).encode("utf-8")


# -- each text once -------------------------------------------------------------------


def test_calls_with_the_same_prompt_store_it_once(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    same = CompletionRequest.chat("what now?", system=SYSTEM, temperature=0.5)
    model = ScriptedModel(seed=1)
    with RecordingStore(path) as store:
        recorder = RecordingModel(model, store)
        for n in range(20):
            recorder.complete(same, site=CallSite("alice", n))
        assert len(store) == 20
        assert store.request(same.key()) == same
    blobs = _blobs(path)
    for message in same.messages:
        assert blobs.count(_encoded(message)) == 1, message.role
    # 1 settings blob + 2 messages + the distinct replies, not 20 copies of the prompt
    replies = {model.complete(same, site=CallSite("alice", n)).to_json() for n in range(20)}
    assert len(blobs) == 3 + len(replies)


def test_a_shared_system_prompt_is_stored_once_across_distinct_requests(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    requests = [CompletionRequest.chat(f"turn {n}: post something", system=SYSTEM)
                for n in range(30)]
    with RecordingStore(path) as store:
        recorder = RecordingModel(ScriptedModel(), store)
        for n, request in enumerate(requests):
            recorder.complete(request, site=CallSite(f"agent{n % 3}", n))
        assert [store.request(r.key()) for r in requests] == requests
    blobs = _blobs(path)
    system = _encoded(ChatMessage("system", SYSTEM))
    assert blobs.count(system) == 1
    assert all(blobs.count(_encoded(r.messages[1])) == 1 for r in requests)
    # the request settings are the same for all 30: one blob
    settings = [b for b in blobs if b.startswith(b'{"max_tokens"')]
    assert len(settings) == 1


def test_dedup_holds_across_sessions(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("again and again", system=SYSTEM)
    for session in range(3):  # a fresh store object (and cache) each time: a resumed run
        with RecordingStore(path) as store:
            RecordingModel(ScriptedModel(), store).complete(request, site=CallSite("a", session))
    blobs = _blobs(path)
    assert blobs.count(_encoded(request.messages[0])) == 1
    assert blobs.count(_encoded(request.messages[1])) == 1
    with RecordingStore(path, readonly=True) as store:
        assert store.sites_for(request.key()) == [CallSite("a", 0), CallSite("a", 1),
                                                  CallSite("a", 2)]
        assert store.request(request.key()) == request


def test_the_store_is_much_smaller_than_the_json_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    model = ScriptedModel(seed=2)
    total = 0
    with RecordingStore(path) as store:
        recorder = RecordingModel(model, store)
        for n in range(300):
            feed = "\n".join(f"#{k} @agent{k % 7}: post {k} about bread and jazz"
                             for k in range(n % 9))
            request = CompletionRequest.chat(f"You are @agent{n % 11}.\nFEED:\n{feed}",
                                             system=SYSTEM, temperature=0.7, max_tokens=120)
            completion = recorder.complete(request, site=CallSite(f"agent{n % 11}", n))
            total += len(request.canonical()) + len(completion.to_json().encode())
    size = path.stat().st_size
    assert size < total  # v1 took about 3x the JSON (a page of overflow per request)
    assert size / 300 < 1500


# -- compression, and the exact round trip --------------------------------------------


def test_pack_deflates_when_it_pays_and_unpack_reverses_it() -> None:
    text = (b'{"content":"You are @alice. Persona: curious baker.","role":"user"}' * 3)
    codec, stored = _pack(text)
    assert codec == _DEFLATE
    assert len(stored) < len(text) / 2
    assert _unpack(codec, stored) == text
    noise = random.Random(0).randbytes(400)  # incompressible: kept as it is
    assert _pack(noise) == (_RAW, noise)
    assert _pack(b"tiny") == (_RAW, b"tiny")
    big = b"".join(b'{"k":%d,"v":"some text to repeat"}' % i for i in range(5000))
    codec, stored = _pack(big)  # past the small window
    assert codec == _DEFLATE
    assert _unpack(codec, stored) == big
    with pytest.raises(ValueError, match="truncated"):
        _unpack(_DEFLATE, stored[: len(stored) // 2])
    with pytest.raises(ValueError, match="unknown codec"):
        _unpack(7, stored)


def test_the_preset_dictionary_is_frozen() -> None:
    # Files written with codec 1 inflate only with these exact bytes.
    assert zlib.crc32(_ZDICT) == 0x54F73161, hex(zlib.crc32(_ZDICT))
    assert len(_ZDICT) == 1042


REPLIES = [
    Completion("plain"),
    Completion(""),
    Completion("héllo ✓ \u0000 \n\ttab \U0001f600 \\ \" '", prompt_tokens=7, completion_tokens=3,
               finish_reason="length", model="m-1", metadata_json='{"id":"x","z":[1,2.5,null]}'),
    Completion("", tool_calls=(ToolCall("call_1", "look", '{"x": 1}'),
                               ToolCall("call_2", "say", "not json {")),
               finish_reason="tool_calls"),
    Completion("long " * 3000),  # deflated, past one page
    Completion(random.Random(1).randbytes(3000).hex()),  # hardly compressible
]


@pytest.mark.parametrize("reopen", [False, True])
def test_recorded_replies_round_trip_byte_for_byte(tmp_path: Path, reopen: bool) -> None:
    path = tmp_path / "r.sqlite"
    requests = [CompletionRequest.chat(f"q{i}", system=SYSTEM) for i in range(len(REPLIES))]
    with RecordingStore(path) as store:
        for i, (request, reply) in enumerate(zip(requests, REPLIES, strict=True)):
            store.put(request.key(), CallSite("a", i), reply, request=request)
        if not reopen:
            got = [store.get(r.key(), CallSite("a", i)) for i, r in enumerate(requests)]
    if reopen:
        with RecordingStore(path, readonly=True) as store:
            got = [store.get(r.key(), CallSite("a", i)) for i, r in enumerate(requests)]
    assert got == REPLIES
    assert [g.to_json() for g in got if g is not None] == [r.to_json() for r in REPLIES]
    assert [g.text for g in got if g is not None] == [r.text for r in REPLIES]


def test_a_damaged_blob_is_reported_not_served(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("hello there, how are you today?", system=SYSTEM)
    with RecordingStore(path) as store:
        store.put(request.key(), CallSite("a", 0), Completion("fine " * 40), request=request)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE blobs SET data = X'00112233' WHERE codec = 1")
    with RecordingStore(path, readonly=True) as store:
        with pytest.raises(RecordingError, match="damaged completion"):
            store.get(request.key(), CallSite("a", 0))
        with pytest.raises(RecordingError, match="damaged request"):
            store.request(request.key())


def test_request_keys_must_be_request_keys(tmp_path: Path) -> None:
    with RecordingStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(ConfigError, match=r"request\.key\(\)"):
            store.put("k1", None, Completion("x"))
        with pytest.raises(ConfigError, match="64 lowercase hex"):
            store.get("A" * 64, None)
        assert ("k1", None) not in store


@given(key=st.one_of(
    st.text(min_size=60, max_size=68),
    st.text(alphabet="0123456789abcdefABCDEF \t\u0661x", min_size=64, max_size=64),
    st.binary(min_size=32, max_size=32).map(lambda raw: raw.hex())))
def test_a_key_is_taken_exactly_when_it_is_64_lowercase_hex_digits(key: str) -> None:
    """The check of a key (the hot path of every put and get) against its plain rule."""
    from simulacra.llm._record import _key_bytes

    valid = len(key) == 64 and set(key) <= set("0123456789abcdef")
    if valid:
        assert _key_bytes(key) == bytes.fromhex(key)
    else:
        with pytest.raises(ConfigError, match="64 lowercase hex"):
            _key_bytes(key)


# -- durability and concurrent writers ------------------------------------------------


def test_a_put_is_committed_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("durable?")
    with RecordingStore(path) as store:
        store.put(request.key(), CallSite("a", 0), Completion("yes"), request=request)
        store.put_failure(request.key(), CallSite("a", 1), RateLimited("429"))
        # another connection sees both while the store is still open
        with RecordingStore(path, readonly=True) as other:
            assert other.get(request.key(), CallSite("a", 0)) == Completion("yes")
            assert other.get_failure(request.key(), CallSite("a", 1)) == ("RateLimited", "429")


def test_every_returned_put_survives_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    script = f"""
import os, sys
sys.path.insert(0, {str(SRC)!r})
from concurrent.futures import ThreadPoolExecutor
from simulacra.llm import CallSite, CompletionRequest, RecordingModel, RecordingStore, ScriptedModel
store = RecordingStore({str(path)!r})
recorder = RecordingModel(ScriptedModel(seed=4), store)
calls = [(CompletionRequest.chat(f"call {{i}}", system="S"), CallSite(f"a{{i % 5}}", i))
         for i in range(200)]
with ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda c: recorder.complete(c[0], site=c[1]), calls))
print("returned", flush=True)
os._exit(3)  # no close, no commit at exit: the process dies
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert "returned" in done.stdout
    with RecordingStore(path, readonly=True) as store:
        assert len(store) == 200
        model = ScriptedModel(seed=4)
        for i in range(200):
            request = CompletionRequest.chat(f"call {i}", system="S")
            site = CallSite(f"a{i % 5}", i)
            assert store.get(request.key(), site) == model.complete(request, site=site)
            assert store.request(request.key()) == request


# -- held writes: one commit per step ---------------------------------------------------


def test_held_writes_are_served_at_once_and_committed_together(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    model = ScriptedModel(seed=2)
    calls = [(CompletionRequest.chat(f"turn {i}", system=SYSTEM), CallSite(f"p{i % 4}", i))
             for i in range(40)]
    with RecordingStore(path) as store:
        store.hold()
        recorder = RecordingModel(model, store)
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda c: recorder.complete(c[0], site=c[1]), calls[:30]))
        store.put_failure(calls[30][0].key(), calls[30][1], RateLimited("slow down"))
        assert store.held == 31
        # served from what is held, before any commit...
        for (request, site), completion in zip(calls[:30], got, strict=True):
            assert store.get(request.key(), site) == completion
        assert store.get_failure(calls[30][0].key(), calls[30][1]) == ("RateLimited",
                                                                      "slow down")
        # ...and not yet in the file
        with RecordingStore(path, readonly=True) as other:
            assert len(other) == 0
        assert store.commit() == 31
        assert store.held == 0
        assert store.commit() == 0
        with RecordingStore(path, readonly=True) as other:
            assert len(other) == 30
            assert other.get_failure(calls[30][0].key(), calls[30][1]) == ("RateLimited",
                                                                          "slow down")
        for request, site in calls[31:]:
            recorder.complete(request, site=site)
        assert len(store) == 39  # a read of the whole store commits what is held first
        recorder.complete(calls[30][0], site=calls[30][1])
    # close commits the rest
    with RecordingStore(path, readonly=True) as store:
        assert len(store) == 40
        replay = ReplayModel(store)
        assert [replay.complete(q, site=s) for q, s in calls[:30]] == got


def test_a_failed_group_commit_keeps_its_writes_held(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("kept?")
    with RecordingStore(path) as store:
        store.hold()
        store.put(request.key(), CallSite("a", 0), Completion("yes"), request=request)
        store._db.execute("PRAGMA busy_timeout = 50")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(RecordingError, match="rolled back"):
                store.commit()
            other.execute("ROLLBACK")
        assert store.held == 1
        assert store.get(request.key(), CallSite("a", 0)) == Completion("yes")
        assert store.commit() == 1
    with RecordingStore(path, readonly=True) as store:
        assert store.get(request.key(), CallSite("a", 0)) == Completion("yes")


@pytest.mark.parametrize(("commit", "offload"), [
    ("store.commit()", False), ("store.commit(wait=False); store.sync()", False),
    ("store.commit(wait=False); store.sync()", True)], ids=["commit", "behind", "child"])
def test_sigkill_keeps_every_committed_step_whole_and_drops_the_step_in_flight(
        tmp_path: Path, commit: str, offload: bool) -> None:
    """Killed in the middle of a step: the file opens, holds every call of the steps whose
    commit returned, byte for byte, and none of the step in flight (asked again on resume).
    A society run's steps end with a write-behind it syncs before each checkpoint; a large
    one's is written by a child process, which ends when the run is killed."""
    path = tmp_path / "r.sqlite"
    steps, per_step = 6, 300
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(SRC)!r})
from simulacra.llm import CallSite, CompletionRequest, RecordingModel, RecordingStore, ScriptedModel
store = RecordingStore({str(path)!r})
store._PART = 64  # a step of 300 goes to the child in parts, as it runs
store.hold(offload={offload})
recorder = RecordingModel(ScriptedModel(seed=9), store)
for step in range({steps}):
    for i in range({per_step}):
        recorder.complete(CompletionRequest.chat(f"step {{step}} call {{i}}", system="S"),
                          site=CallSite(f"a{{i % 7}}", step * {per_step} + i))
        if step == {steps} - 1 and i == {per_step} // 2:
            print("in flight", flush=True)
            time.sleep(60)  # killed here, half a step held
    {commit}
    print("committed", step, flush=True)
    if step == 0 and store._offload is not None:
        print("child", store._offload._proc.pid, flush=True)
"""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.strip())
        if line.startswith("in flight"):
            break
    process.kill()
    process.communicate(timeout=30)
    assert lines[-1] == "in flight", lines
    children = [int(line.split()[1]) for line in lines if line.startswith("child ")]
    assert len(children) == int(offload), lines
    for pid in children:  # the writer process ends with the run it wrote for
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
            assert time.monotonic() < deadline, "the writer process outlived the run"
            time.sleep(0.05)
    assert [line for line in lines[:-1] if not line.startswith("child ")] == [
        f"committed {s}" for s in range(steps - 1)]
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    model = ScriptedModel(seed=9)
    with RecordingStore(path, readonly=True) as store:
        assert len(store) == (steps - 1) * per_step
        for step in range(steps):
            for i in range(0, per_step, 7):
                request = CompletionRequest.chat(f"step {step} call {i}", system="S")
                site = CallSite(f"a{i % 7}", step * per_step + i)
                found = store.get(request.key(), site)
                if step < steps - 1:
                    assert found == model.complete(request, site=site)
                    assert store.request(request.key()) == request
                else:
                    assert found is None


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return "zombie"  # gone
    return "zombie" if "\nState:\tZ" in status else "running"


def test_concurrent_writers_share_commits_and_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    calls = [(CompletionRequest.chat(f"p{i % 37}", system=SYSTEM), CallSite(f"a{i % 9}", i))
             for i in range(400)]
    model = ScriptedModel(seed=8)
    with RecordingStore(path) as store:
        recorder = RecordingModel(model, store)
        with ThreadPoolExecutor(max_workers=32) as pool:
            got = list(pool.map(lambda c: recorder.complete(c[0], site=c[1]), calls))
        assert len(store) == 400
        assert recorder.recorded == 400
        replay = ReplayModel(store)
        assert [replay.complete(q, site=s) for q, s in calls] == got
    # each distinct prompt once, even though 32 threads wrote them at the same time
    blobs = _blobs(path)
    assert len(blobs) == len(set(blobs))
    assert blobs.count(_encoded(ChatMessage("system", SYSTEM))) == 1


def test_a_failed_commit_fails_its_writers_and_keeps_the_store_usable(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    first, second = CompletionRequest.chat("first"), CompletionRequest.chat("second")
    with RecordingStore(path) as store:
        store.put(first.key(), CallSite("a", 0), Completion("1"), request=first)
        store._db.execute("PRAGMA busy_timeout = 50")  # fail fast while another holds the lock
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the database
            with pytest.raises(RecordingError, match="rolled back") as info:
                store.put(second.key(), CallSite("a", 1), Completion("2"), request=second)
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
            other.execute("ROLLBACK")
        assert len(store) == 1
        store.put(second.key(), CallSite("a", 1), Completion("2"), request=second)
        assert store.get(second.key(), CallSite("a", 1)) == Completion("2")
        assert store.request(second.key()) == second
    with RecordingStore(path, readonly=True) as store:
        assert len(store) == 2


def test_close_waits_for_writes_under_way(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store = RecordingStore(path)
    recorder = RecordingModel(ScriptedModel(), store)
    started = threading.Barrier(9)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        started.wait()
        for n in range(25):
            try:
                recorder.complete(CompletionRequest.chat(f"{i}/{n}"), site=CallSite(str(i), n))
            except RecordingError as exc:  # closed under it: refused, never half-written
                errors.append(exc)
                return

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    started.wait()
    store.close()
    for thread in threads:
        thread.join()
    assert all("closed" in str(error) for error in errors)
    with RecordingStore(path, readonly=True) as reread:
        assert len(reread) == recorder.recorded  # every put that returned is there
        for key, site in reread:
            assert reread.get(key, site) is not None


# -- the v1 layout: read, upgraded, or refused ----------------------------------------


def _v1_calls() -> list[tuple[CompletionRequest, CallSite | None]]:
    """The calls ``data/recordings-v1.sqlite`` holds (recorded with ``ScriptedModel(seed=5)``)."""
    calls: list[tuple[CompletionRequest, CallSite | None]] = []
    for n in range(3):
        for agent in ("alice", "bob"):
            request = CompletionRequest.chat(f"turn {n}: what now, {agent}?", system="Be brief.",
                                             temperature=0.5)
            calls.append((request, CallSite(agent, n)))
    same = CompletionRequest.chat("the same prompt twice", system="Be brief.")
    calls += [(same, CallSite("carol", 0)), (same, CallSite("carol", 1)),
              (CompletionRequest.chat("no call site"), None)]
    return calls


V1_ODD = Completion("héllo ✓ \u0000 \n\ttab \U0001f600",
                    tool_calls=(ToolCall("c1", "look", '{"x": 1}'),), prompt_tokens=7,
                    completion_tokens=3, finish_reason="tool_calls", model="m",
                    metadata_json='{"z":[1,2]}')


def _check_v1_contents(store: RecordingStore) -> None:
    model = ScriptedModel(seed=5)
    assert len(store) == 10
    for request, site in _v1_calls():
        assert store.get(request.key(), site) == model.complete(request, site=site)
        assert store.request(request.key()) == request
    odd = CompletionRequest.chat("unicode ✓")
    assert store.get(odd.key(), CallSite("dave", 0)) == V1_ODD
    failed = CompletionRequest.chat("this one failed")
    assert store.get_failure(failed.key(), CallSite("dave", 1)) == ("RateLimited",
                                                                     "429 slow down")
    assert store.calls_per_agent() == {"alice": 3, "bob": 3, "carol": 2, "dave": 2}
    assert len({key for key, _ in store}) == 9  # carol's two calls share one request
    assert list(store) == sorted(store, key=lambda ks: (
        "" if ks[1] is None else ks[1].agent, -1 if ks[1] is None else ks[1].n, ks[0]))


def test_a_v1_file_opened_read_only_is_read_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(V1_FILE, path)
    before = path.read_bytes()
    with RecordingStore(path, readonly=True) as store:
        assert store.opened_format == "simulacra.llm.recordings.v1"
        _check_v1_contents(store)
        with pytest.raises(RecordingError, match="read-only"):
            store.put(CompletionRequest.chat("x").key(), None, Completion("y"))
    assert path.read_bytes() == before


def test_a_v1_file_opened_for_writing_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(V1_FILE, path)
    with RecordingStore(path) as store:
        assert store.opened_format == "simulacra.llm.recordings.v1"
        _check_v1_contents(store)
        more = CompletionRequest.chat("after the upgrade", system="Be brief.")
        store.put(more.key(), CallSite("erin", 0), Completion("ok"), request=more)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == (
            STORE_FORMAT,)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"meta", "blobs", "completions", "failures"}
    with RecordingStore(path, readonly=True) as store:
        assert store.opened_format == STORE_FORMAT
        assert len(store) == 11
        assert store.get(more.key(), CallSite("erin", 0)) == Completion("ok")
        # "Be brief." was in v1 once per request; now it is one blob
        assert _blobs(path).count(_encoded(ChatMessage("system", "Be brief."))) == 1


def test_a_v1_file_with_a_key_that_is_no_request_key_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "odd.sqlite"
    shutil.copy(V1_FILE, path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO completions VALUES ('k1', 'zed', 0, ?)",
                   (Completion("z").to_json(),))
    before = path.read_bytes()
    with pytest.raises(RecordingError, match=r"odd\.sqlite.*'k1'.*cannot be upgraded"):
        RecordingStore(path)
    assert path.read_bytes() == before  # the upgrade rolled back: nothing changed
    with pytest.raises(RecordingError, match="'k1'"):
        RecordingStore(path, readonly=True)


def test_other_versions_are_refused_naming_the_file_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('format', 'simulacra.llm.recordings.v9')")
    for readonly in (False, True):
        with pytest.raises(RecordingError) as info:
            RecordingStore(path, readonly=readonly)
        message = str(info.value)
        assert str(path) in message
        assert "'simulacra.llm.recordings.v9'" in message
        assert "another version of simulacra" in message
        assert "simulacra.llm.recordings.v1" in message
        assert STORE_FORMAT in message


def test_a_new_store_is_v2() -> None:
    assert STORE_FORMAT == "simulacra.llm.recordings.v2"


def test_no_connection_is_left_open_by_a_refused_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(RecordingError, match="not a recording store"):
        RecordingStore(junk)
    with pytest.raises(RecordingError, match="not a recording store"):
        RecordingStore(junk, readonly=True)


def test_a_preloaded_store_answers_as_the_file_does(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    model = ScriptedModel(seed=3)
    calls = [(CompletionRequest.chat(f"p{i % 13}", system=SYSTEM), CallSite(f"a{i % 5}", i))
             for i in range(120)]
    with RecordingStore(path) as store:
        recorder = RecordingModel(model, store)
        for request, site in calls[:100]:
            recorder.complete(request, site=site)
        store.put_failure(calls[100][0].key(), calls[100][1], RateLimited("later"))
        assert not store.preload()  # a store open for writing reads from its file
    # asked: every recorded site, unrecorded sites, a recorded key at another site
    asked = [*calls, (calls[0][0], CallSite("a0", 999)), (calls[1][0], None)]
    with RecordingStore(path, readonly=True) as plain:
        expected = [plain.get(q.key(), s) for q, s in asked]
    assert sum(found is not None for found in expected) == 100
    with RecordingStore(path, readonly=True) as store:
        assert store.preload()
        assert store.preload()  # once
        assert [store.get(q.key(), s) for q, s in asked] == expected
        assert store.get_failure(calls[100][0].key(), calls[100][1]) == ("RateLimited", "later")
    with RecordingStore(path, readonly=True) as store:
        store.PRELOAD_MAX = 99  # type: ignore[misc]  # fewer than it holds: stays on disk
        assert not store.preload()
        assert [store.get(q.key(), s) for q, s in asked] == expected
