"""A recording store's write-behinds written by a child process (off this process's GIL).

A society run of thousands of calls a step spends most of what recording costs it
in Python: each call's completion and messages encoded, hashed and packed. On the
store's writer thread that work still holds the run's GIL. ``RecordingStore.hold(
offload=True)`` hands it to a child process instead: the run's thread only lists
the step's calls as plain data (one ``pickle`` of flat tuples), the writer thread
sends them down a pipe, and the child (``python -c ...`` of ``_record.serve_offload``)
encodes, hashes and packs them and writes them in one transaction, as
``RecordingStore`` itself would, then answers one line. The step's calls are
durable when that line came back: the guarantee of a write-behind is the same.

The calls go to the child while the step runs, in parts of ``RecordingStore._PART``
calls, which it writes at once inside a transaction that only the step's commit
commits: at the step's end little is left to write, and a step cut off (the run
killed, the child killed) leaves nothing of itself in the file, as before.

The child starts when the first part is sent (its imports overlap the run), in
a session of its own (a Ctrl-C in the terminal reaches only the run, which
stops the way it always does). If the child cannot start or dies, the store
writes the step in this process instead: slower, never different
(:class:`WriterGone`).

Frames: an 8-byte big-endian length, then a kind byte and a pickle of a list of
rows; a length of 0 asks the child to close the store and exit. Kinds: ``P``, a
part (no answer); ``C``, the step's last rows and its commit (one JSON line
answers it: ``{"ok": true}`` or ``{"error": "..."}``, the step rolled back).
Rows:

* ``("call", key bytes, agent, n, completion fields, settings, messages)``, where
  the fields are ``Completion.fields()`` (``completion_text`` encodes them),
  *settings* is the request's ``(head, tail)`` canonical text around its
  messages (``CompletionRequest._settings_json()``) and *messages* each
  message's ``(role, content, name)``, or both ``None`` for a call stored
  without its request;
* ``("failure", key bytes, agent, n, (error type name, message))``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["FRAME", "Offload", "WriterGone"]

#: The bytes of a frame's length.
FRAME = 8


class WriterGone(Exception):
    """The child could not be started, or died: the caller writes the group itself."""


class Offload:
    """The parent's end: one child process, fed from one thread at a time (the store's writer)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._proc: subprocess.Popen[bytes] | None = None
        self.gone: str | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        # The package the child imports is this one (a checkout on sys.path, or installed).
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        code = "from simulacra.llm._record import serve_offload; serve_offload()"
        try:
            return subprocess.Popen(  # noqa: S603  (this interpreter, our own code)
                [sys.executable, "-c", code, self.path], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                start_new_session=True)
        except OSError as exc:
            raise self._lost(f"cannot start it: {exc}") from None

    def _lost(self, why: str) -> WriterGone:
        self.gone = why
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)
        return WriterGone(why)

    def _put(self, data: bytes) -> subprocess.Popen[bytes]:
        """Write one frame to the child (started by the first); WriterGone if it is not there."""
        if self.gone is not None:
            raise WriterGone(self.gone)
        proc = self._proc
        if proc is None:
            proc = self._proc = self._start()
        stdin = proc.stdin
        assert stdin is not None  # noqa: S101  (PIPE)
        try:
            stdin.write(len(data).to_bytes(FRAME, "big"))
            stdin.write(data)
            stdin.flush()
        except (OSError, ValueError) as exc:
            raise self._lost(f"it died ({exc})") from None
        return proc

    def send(self, data: bytes) -> None:
        """Send a part of the step (``b"P"`` + pickled rows): no answer is awaited.

        A child that is gone is only noted: the step's commit finds it (:meth:`write`
        raises :class:`WriterGone`) and the step is written by the caller.
        """
        try:
            self._put(data)
        except WriterGone:
            pass

    def write(self, data: bytes) -> None:
        """Send the step's commit (``b"C"`` + its last rows); return once the child committed.

        Raises:
            WriterGone: The child is not there (or no longer): nothing is known
                of the group, which the caller writes itself (writing it twice
                is harmless: the store's writes are idempotent).
            RuntimeError: The child wrote nothing of the group; its message.
        """
        proc = self._put(data)
        stdout = proc.stdout
        assert stdout is not None  # noqa: S101  (PIPE)
        try:
            line = stdout.readline()
        except (OSError, ValueError) as exc:
            raise self._lost(f"it died ({exc})") from None
        if not line:
            raise self._lost(f"it died (exit status {proc.poll()})")
        try:
            answer = json.loads(line)
        except ValueError:
            raise self._lost(f"it answered {line[:80]!r}") from None
        if answer.get("error") is not None:
            raise RuntimeError(str(answer["error"]))

    def close(self) -> None:
        """Ask the child to close the store and exit (after every group sent was answered)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None  # noqa: S101
            proc.stdin.write(bytes(FRAME))
            proc.stdin.flush()
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
