"""The recording store's write-behind: ``commit(wait=False)`` writes on another thread.

A society run hands each step's calls to the store's writer thread and waits
for them (``sync``) before a checkpoint and before it says it finished. These
tests check that what a write-behind leaves in the file is what a plain
commit leaves (Hypothesis drives the interleavings, with blob ids forgotten
and written by another session meanwhile, so the careful path runs too), that
held and flying writes are served at once, and that a failed write-behind keeps
its writes and says so. SIGKILL keeps every synced step: the kill test in
test_llm_record_storage.py runs with a write-behind too. Real SQLite files
throughout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra.errors import RateLimited, RecordingError
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    RecordingModel,
    RecordingStore,
    ScriptedModel,
)
from simulacra.llm._record import _unpack

pytestmark = pytest.mark.timeout(300)

#: One operation: ("put", prompt, reply, agent, n), ("fail", prompt, agent, n),
#: ("commit", wait), ("sync",) or ("other",): another session writes some prompts.
_OPS = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 6), st.integers(0, 4), st.integers(0, 2),
              st.integers(0, 5)),
    st.tuples(st.just("fail"), st.integers(0, 6), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("commit"), st.booleans()),
    st.tuples(st.just("sync")),
    st.tuples(st.just("other"), st.integers(0, 6)),
)


def _request(prompt: int) -> CompletionRequest:
    return CompletionRequest.chat(f"prompt {prompt} " + "words " * prompt,
                                  system=f"system {prompt % 2}")


def _site(agent: int, n: int) -> CallSite:
    return CallSite(f"agent{agent}", n)


def _contents(path: Path) -> dict[str, Any]:
    """What the file holds, by value (blob ids resolved): completions, requests, failures."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        blobs = {i: _unpack(codec, data) for i, codec, data in
                 db.execute("SELECT id, codec, data FROM blobs")}
        digests = db.execute("SELECT COUNT(*), COUNT(DISTINCT sha256) FROM blobs").fetchone()
        assert digests[0] == digests[1]
        calls = {(bytes(k).hex(), a, n): (blobs[c], None if r is None else
                                         tuple(blobs[int(x)] for x in r.split()))
                 for k, a, n, c, r in db.execute(
                     "SELECT request_key, agent, n, completion, request FROM completions")}
        failures = {(bytes(k).hex(), a, n): (e, m) for k, a, n, e, m in db.execute(
            "SELECT request_key, agent, n, error, message FROM failures")}
    return {"calls": calls, "failures": failures}


def _play(path: Path, ops: list[tuple[Any, ...]], *, behind: bool, ahead: int | None,
          offload: bool = False, part: int | None = None) -> None:
    store = RecordingStore(path)
    if ahead is not None:
        store._AHEAD = ahead  # type: ignore[misc]  # forget ids often: the careful path runs
    if part is not None:
        store._PART = part  # type: ignore[misc]  # parts of a few calls: many go to the child
    store.hold(offload=offload)
    try:
        for op in ops:
            if op[0] == "put":
                _, prompt, reply, agent, n = op
                request = _request(prompt)
                store.put(request.key(), _site(agent, n), Completion(f"reply {reply}"),
                          request=request)
                assert store.get(request.key(), _site(agent, n)) == Completion(f"reply {reply}")
            elif op[0] == "fail":
                _, prompt, agent, n = op
                request = _request(prompt)
                store.put_failure(request.key(), _site(agent, n), RateLimited(f"no {prompt}"))
                assert store.get_failure(request.key(), _site(agent, n)) == (
                    "RateLimited", f"no {prompt}")
            elif op[0] == "commit":
                store.commit(wait=not op[1]) if behind else store.commit()
            elif op[0] == "sync":
                store.sync()
            else:  # another session records a prompt (its blobs) in the same file
                with RecordingStore(path) as other:
                    request = _request(op[1])
                    other.put(request.key(), _site(9, op[1]), Completion("other"),
                              request=request)
    finally:
        store.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OPS, max_size=40), ahead=st.sampled_from([None, 1, 3]))
def test_a_write_behind_leaves_what_a_plain_commit_leaves(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]],
        ahead: int | None) -> None:
    where = tmp_path_factory.mktemp("wb")
    _play(where / "plain.sqlite", ops, behind=False, ahead=None)
    _play(where / "behind.sqlite", ops, behind=True, ahead=ahead)
    assert _contents(where / "behind.sqlite") == _contents(where / "plain.sqlite")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OPS.filter(lambda op: op[0] != "other"), max_size=40),
       part=st.sampled_from([1, 2, 3, 2048]))
def test_an_offloaded_write_behind_leaves_what_a_plain_commit_leaves(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]],
        part: int) -> None:
    """hold(offload=True): a child process writes the steps, in parts; the file is the same.

    No other session writes meanwhile: the child holds the step's transaction open.
    """
    where = tmp_path_factory.mktemp("off")
    _play(where / "plain.sqlite", ops, behind=False, ahead=None)
    _play(where / "child.sqlite", ops, behind=True, ahead=None, offload=True, part=part)
    assert _contents(where / "child.sqlite") == _contents(where / "plain.sqlite")


def _poison(path: Path) -> None:
    """Make the file refuse the call row of agent 'poison' (a real SQLite failure)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("CREATE TRIGGER poison BEFORE INSERT ON completions WHEN NEW.agent = "
                   "'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END")


@pytest.mark.parametrize(("offload", "part"), [(False, None), (True, None), (True, 1)],
                         ids=["thread", "child", "child-in-parts"])
def test_a_write_behind_the_file_refuses_is_kept_held_and_said(
        tmp_path: Path, offload: bool, part: int | None) -> None:
    path = tmp_path / "r.sqlite"
    good, bad = CompletionRequest.chat("good"), CompletionRequest.chat("bad")
    with RecordingStore(path) as store:
        if part is not None:
            store._PART = part  # type: ignore[misc]  # each call its own part
        store.hold(offload=offload)
        _poison(path)
        store.put(good.key(), _site(0, 0), Completion("fine"), request=good)
        store.put(bad.key(), CallSite("poison", 0), Completion("never"), request=bad)
        assert store.commit(wait=False) == 2
        with pytest.raises(RecordingError, match=r"rolled back.*poisoned row"):
            store.sync()
        assert store.held == 2  # nothing of the group was written: both held again
        assert store.get(good.key(), _site(0, 0)) == Completion("fine")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            assert db.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 0
            db.execute("DROP TRIGGER poison")
        assert store.commit(wait=False) == 2
        store.sync()
    with RecordingStore(path, readonly=True) as store:
        assert store.get(good.key(), _site(0, 0)) == Completion("fine")
        assert store.get(bad.key(), CallSite("poison", 0)) == Completion("never")


def _wait_for_a_writer(path: Path) -> None:
    """Return once another connection holds a write transaction on *path*."""
    deadline = time.monotonic() + 30
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=0)) as db:
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # locked: the writer is there
                return
            db.execute("ROLLBACK")
            assert time.monotonic() < deadline, "no transaction was opened"
            time.sleep(0.01)


@pytest.mark.parametrize("part", [2048, 2], ids=["whole", "in-parts"])
def test_a_dead_writer_process_leaves_the_writes_to_this_one(tmp_path: Path,
                                                           part: int) -> None:
    """The child killed between two steps (or with a step's parts sent to it): that step
    is written here, its parts too (the child's transaction died with it); nothing lost."""
    path = tmp_path / "r.sqlite"
    requests = [CompletionRequest.chat(f"call {i}", system="S") for i in range(6)]
    with RecordingStore(path) as store:
        store._PART = part  # type: ignore[misc]
        store.hold(offload=True)
        for i in range(3):
            store.put(requests[i].key(), _site(i, 0), Completion(f"r{i}"), request=requests[i])
        store.commit(wait=False)
        store.sync()
        child = store._offload._proc  # type: ignore[union-attr]
        assert child is not None
        if part == 2048:
            child.kill()
            child.wait()
        for i in range(3, 6):
            store.put(requests[i].key(), _site(i, 0), Completion(f"r{i}"), request=requests[i])
            if i == 4 and part != 2048:  # calls 3 and 4 went to the child as a part
                store._writer.submit(lambda: None).result()  # type: ignore[union-attr]
                _wait_for_a_writer(path)  # the child holds the step's transaction open
                child.kill()  # in the middle of it
                child.wait()
        store.commit(wait=False)
        store.sync()
        assert store._offload.gone is not None  # type: ignore[union-attr]
    with RecordingStore(path, readonly=True) as store:
        for i in range(6):
            assert store.get(requests[i].key(), _site(i, 0)) == Completion(f"r{i}")
            assert store.request(requests[i].key()) == requests[i]


def test_flying_writes_are_served_and_durable_after_sync(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    model = ScriptedModel(seed=4)
    with RecordingStore(path) as store:
        store.hold()
        recorder = RecordingModel(model, store)
        calls = [(CompletionRequest.chat(f"step {s} call {i}", system="S"), _site(i % 3, s * 9 + i))
                 for s in range(4) for i in range(9)]
        got = []
        for step in range(4):
            for request, site in calls[step * 9:(step + 1) * 9]:
                got.append(recorder.complete(request, site=site))
            assert store.commit(wait=False) == 9
            # served while (perhaps) still being written
            for (request, site), completion in zip(calls[:len(got)], got, strict=True):
                assert store.get(request.key(), site) == completion
        store.sync()
        with RecordingStore(path, readonly=True) as other:
            assert len(other) == 36
            for (request, site), completion in zip(calls, got, strict=True):
                assert other.get(request.key(), site) == completion
                assert other.request(request.key()) == request


def test_a_failed_write_behind_keeps_its_writes_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("kept?")
    with RecordingStore(path) as store:
        store.hold()
        store.put(request.key(), _site(0, 0), Completion("yes"), request=request)
        store._db.execute("PRAGMA busy_timeout = 50")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the file
            assert store.commit(wait=False) == 1
            with pytest.raises(RecordingError, match="rolled back"):
                store.sync()
            other.execute("ROLLBACK")
        assert store.held == 1  # held again
        assert store.get(request.key(), _site(0, 0)) == Completion("yes")
        assert store.commit() == 1
    with RecordingStore(path, readonly=True) as store:
        assert store.get(request.key(), _site(0, 0)) == Completion("yes")


def test_an_interrupted_sync_is_no_failed_write_and_is_waited_for_again(tmp_path: Path) -> None:
    """Ctrl-C while a run waits for its write-behind: KeyboardInterrupt, not "rolled back"."""
    path = tmp_path / "r.sqlite"
    request = CompletionRequest.chat("kept?")
    with RecordingStore(path) as store:
        store.hold()
        store.put(request.key(), _site(0, 0), Completion("yes"), request=request)
        store._db.execute("PRAGMA busy_timeout = 60000")  # the writer waits for the file
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the file meanwhile
            assert store.commit(wait=False) == 1
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    store.sync()
            finally:
                timer.join()
                other.execute("ROLLBACK")
        store.sync()  # the write goes on, and is waited for
        assert store.held == 0
    with RecordingStore(path, readonly=True) as store:
        assert store.get(request.key(), _site(0, 0)) == Completion("yes")


def test_no_call_is_made_while_the_last_steps_calls_could_still_be_lost(
        tmp_path: Path) -> None:
    """A RecordingModel's next call waits for the write-behind of the calls before it."""
    path = tmp_path / "r.sqlite"
    made: list[str] = []

    class Counting:
        def complete(self, request: CompletionRequest, *, site: CallSite | None = None
                     ) -> Completion:
            made.append(request.prompt)
            return Completion(f"re: {request.prompt}")

        async def acomplete(self, request: CompletionRequest, *,
                            site: CallSite | None = None) -> Completion:
            return self.complete(request, site=site)

    first, second = CompletionRequest.chat("step 0"), CompletionRequest.chat("step 1")
    with RecordingStore(path) as store:
        store.hold()
        recorder = RecordingModel(Counting(), store)
        recorder.complete(first, site=_site(0, 0))
        store._db.execute("PRAGMA busy_timeout = 60000")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # the step's write waits for the file
            assert store.commit(wait=False) == 1
            caller = threading.Thread(target=recorder.complete, args=(second,),
                                      kwargs={"site": _site(0, 1)})
            caller.start()
            caller.join(0.5)
            assert caller.is_alive()
            assert made == ["step 0"]  # the next call is not made yet
            other.execute("ROLLBACK")
        caller.join(30)
        assert made == ["step 0", "step 1"]
        with RecordingStore(path, readonly=True) as reader:
            assert reader.get(first.key(), _site(0, 0)) == Completion("re: step 0")
