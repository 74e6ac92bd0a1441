"""Checkpoint files: a versioned header, a checksum, and the engine's state.

A checkpoint is one file::

    SIMULACRA-CHECKPOINT 1          (a line)
    <engine name> <sha-256 of the body, hex>     (a line)
    <body: the engine's state, pickled (protocol 5)>

* The **version** is the first line: a reader that does not know it refuses
  the file by name ("format version 9; this simulacra reads 1") instead of
  misreading it.
* The **checksum** covers the whole body: a truncated or corrupted file is
  refused before anything is unpickled.
* Files are written to a temporary name and renamed into place, and a name
  that exists is never written again: a crash mid-write leaves the previous
  checkpoints intact, and no checkpoint is ever overwritten.

The body is pickled because engine state holds the world's and the agents'
own objects (actions, observations). Pickle runs code on load: load only
checkpoints you wrote. The checksum guards against damage, not against an
attacker.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from pathlib import Path
from typing import Any, Final

from simulacra.errors import CheckpointError

__all__ = ["CHECKPOINT_VERSION", "checkpoint_files", "checkpoint_step", "read_checkpoint",
           "write_checkpoint"]

#: The format version this simulacra writes and reads.
CHECKPOINT_VERSION: Final = 1
_MAGIC: Final = b"SIMULACRA-CHECKPOINT"
_NAME: Final = re.compile(r"^checkpoint-(\d{6})\.ckpt$")


def write_checkpoint(directory: str | os.PathLike[str], number: int, engine: str,
                     state: Any) -> Path:
    """Write *state* as checkpoint *number* of *directory*; return its path.

    Raises:
        CheckpointError: That checkpoint exists already (never overwritten),
            or *state* cannot be pickled (the message names why).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"checkpoint-{number:06d}.ckpt"
    if path.exists():
        raise CheckpointError(f"{path}: exists already; checkpoints are never overwritten")
    try:
        body = pickle.dumps(state, protocol=5)
    except Exception as exc:  # pickling runs arbitrary __reduce__ code
        raise CheckpointError(
            f"{path}: the engine state cannot be pickled ({type(exc).__name__}: {exc}); "
            "agents and worlds must keep plain, picklable state") from exc
    if " " in engine or "\n" in engine:
        raise CheckpointError(f"engine name must have no spaces, got {engine!r}")
    header = (_MAGIC + b" " + str(CHECKPOINT_VERSION).encode() + b"\n" + engine.encode()
              + b" " + hashlib.sha256(body).hexdigest().encode() + b"\n")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as file:
        file.write(header)
        file.write(body)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    return path


def read_checkpoint(path: str | os.PathLike[str], engine: str | None = None) -> Any:
    """Read the state of checkpoint *path*, checking its version, checksum and engine.

    Raises:
        CheckpointError: The file is missing, of an unknown format version,
            truncated or corrupted, or of another engine than *engine*.
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{file}: cannot read the checkpoint ({exc.strerror})") from None
    first, _, rest = data.partition(b"\n")
    magic, _, version = first.partition(b" ")
    if magic != _MAGIC:
        raise CheckpointError(f"{file}: not a simulacra checkpoint (no {_MAGIC.decode()} header)")
    if version != str(CHECKPOINT_VERSION).encode():
        shown = version.decode("ascii", "replace")
        raise CheckpointError(
            f"{file}: checkpoint format version {shown!r}; this simulacra reads version "
            f"{CHECKPOINT_VERSION}")
    second, newline, body = rest.partition(b"\n")
    name, _, digest = second.partition(b" ")
    if not newline or len(digest) != 64:
        raise CheckpointError(f"{file}: truncated checkpoint (its header is incomplete)")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise CheckpointError(
            f"{file}: corrupted or truncated checkpoint (the checksum of its {len(body)} "
            "bytes does not match the header)")
    if engine is not None and name.decode() != engine:
        raise CheckpointError(
            f"{file}: a checkpoint of the {name.decode()!r} engine, not of {engine!r}")
    try:
        return pickle.loads(body)  # noqa: S301  (checksummed, written by simulacra)
    except Exception as exc:
        raise CheckpointError(
            f"{file}: the checkpoint cannot be loaded ({type(exc).__name__}: {exc}); was it "
            "written by a model whose classes have changed since?") from exc


def checkpoint_step(path: str | os.PathLike[str]) -> int:
    """The step of checkpoint file *path* (``checkpoint-000042.ckpt`` is step 42)."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint file name")
    return int(match.group(1))


def checkpoint_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The checkpoints of *directory*, oldest first (an empty list when there are none)."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))
