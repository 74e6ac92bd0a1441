"""``manifest.json``: what a run directory needs to be reproduced, and proof of what it holds.

Written when a run starts and completed when it ends: the versions of
simulacra, Python and the platform; the provider, model and base URL (never
an API key: only the *name* of the variable it is read from); SHA-256 of the
resolved config, of the world factory's source file and, at the end, of the
recordings; the master seed; and where the completions came from (``live``,
``recordings`` for a replay, or ``live+recordings`` for a resumed run).

It also makes a run directory portable: the world factory's file is stored
relative to the run directory as well, so a directory copied to another
folder or machine (together with the model's files, at the same relative
place) finds it again (:func:`portable_factory`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from simulacra._util import os_problem
from simulacra.agents import canonical_line
from simulacra.errors import ConfigError

from ._endpoints import endpoints_info

if TYPE_CHECKING:
    from ._config import RunConfig

__all__ = ["MANIFEST_SCHEME", "event_step_of", "factory_file", "finish_manifest",
           "portable_factory", "start_manifest"]

MANIFEST_SCHEME = "simulacra.manifest.v1"
#: The run-directory formats this release reads: every run written since the
#: manifest exists is v1 (tests/social/data/runs_v1 holds two, replayed by the tests).
READABLE_SCHEMES: Final = (MANIFEST_SCHEME,)


def _sha256_file(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_sha256(data: Mapping[str, Any]) -> str:
    """SHA-256 of the resolved config in the project's canonical encoding (``canonical_line``)."""
    return hashlib.sha256(canonical_line(data)).hexdigest()


#: The engine keys that say where the turns run, not what is simulated.
_WHERE_TURNS_RUN: Final = ("shards", "shard_mode", "partition")
#: The model keys that say which endpoint answers a call, not what the call is.
_WHO_ANSWERS: Final = ("endpoints", "routing")


def simulation_sha256(data: Mapping[str, Any]) -> str:
    """:func:`config_sha256` of the config less its ``run`` section: what the run simulates.

    A resume may change ``run.*`` settings (a budget, checkpoints) and where the
    turns run (``sim.engine.shards``, ``shard_mode``, left out of the hash) and
    no other, so this hash is the same in every session of a run; a replay
    checks the stored ``config.yaml`` against it.
    """
    simulated = {key: value for key, value in data.items() if key != "run"}
    sim = simulated.get("sim") or {}
    engine, llm = sim.get("engine"), sim.get("llm")
    if ((isinstance(engine, Mapping) and any(key in engine for key in _WHERE_TURNS_RUN))
            or (isinstance(llm, Mapping) and any(key in llm for key in _WHO_ANSWERS))):
        # Where the turns run and which endpoint answers are not what is simulated: a run
        # resumes, and replays, at any shard count and against moved servers (the keys are
        # stored only when set, so older runs hash as they did).
        simulated = copy.deepcopy(simulated)
        for key in _WHERE_TURNS_RUN:
            simulated["sim"].get("engine", {}).pop(key, None)
        for key in _WHO_ANSWERS:
            simulated["sim"].get("llm", {}).pop(key, None)
    return config_sha256(simulated)


def factory_file(ref: str | None) -> Path | None:
    """The source file of a ``sim.world.factory`` reference (a file, or a module's file)."""
    if not ref:
        return None
    where = ref.rpartition(":")[0]
    if where.endswith(".py") or "/" in where or "\\" in where:
        return Path(where)
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        return None
    origin = None if spec is None else spec.origin
    return Path(origin) if origin and origin.endswith(".py") else None


def start_manifest(path: Path, config: RunConfig, *, completions: str,
                   replayable: bool | None = None,
                   scenario: Mapping[str, Any] | None = None,
                   event_step: str = "window") -> None:
    """Write ``manifest.json`` at the start of a run (or rewrite it for a resume or replay).

    *replayable* False marks a run resumed with ``--re-record`` after its
    recordings were lost (a replay then refuses it); None keeps what was there.
    *scenario* is the run's scenario (name, SHA-256, file); None keeps what was
    there (a resume), and a run without one has none. *event_step* is what the
    event-driven engine's events hold in ``step`` (:func:`event_step_of`).
    """
    from simulacra._version import __version__  # noqa: PLC0415

    llm = config.sim.llm
    source = factory_file(config.sim.world.factory)
    run_dir = path.parent
    relative = None
    if source is not None and source.is_file():
        relative = os.path.relpath(source.resolve(), run_dir.resolve())
    previous = read_manifest(path) if path.is_file() else {}
    manifest = {
        "scheme": MANIFEST_SCHEME,
        "simulacra": __version__,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "seed": config.seed,
        "config_sha256": config_sha256(config.data),
        "simulation_sha256": simulation_sha256(config.data),
        "provider": ({"name": "endpoints", "model": None, "base_url": None,
                      "api_key_env": None, "endpoints": endpoints_info(config)}
                     if llm.endpoints else
                     {"name": llm.provider, "model": llm.model, "base_url": llm.base_url,
                      "api_key_env": llm.api_key_env if llm.provider != "scripted" else None}),
        "world_factory": {
            "ref": config.sim.world.factory,
            "file_relative_to_run_dir": relative,
            "sha256": None if source is None else _sha256_file(source),
        },
        "completions": completions,
        "sessions": [*previous.get("sessions", []), completions],
        "recordings_sha256": None,
        "replayable": (previous.get("replayable", True) if replayable is None
                       else replayable and previous.get("replayable", True)),
        "finished": False,
        "event_step": event_step,
    }
    kept = dict(scenario) if scenario is not None else previous.get("scenario")
    if kept is not None:
        manifest["scenario"] = kept
    _write(path, manifest)


def event_step_of(manifest: Mapping[str, Any]) -> str:
    """What a run's events hold in ``step`` on the event-driven engine.

    Its window; or the acting agent's turn for runs written before
    ``ActionEvent.turn``, whose manifest does not say.
    """
    meaning = manifest.get("event_step", "turn")
    return meaning if meaning in ("window", "turn") else "turn"


def finish_manifest(path: Path, recordings: Path) -> None:
    """Complete ``manifest.json`` when the run ends: the recordings' SHA-256."""
    manifest: dict[str, Any] = read_manifest(path) if path.is_file() else {
        "scheme": MANIFEST_SCHEME}
    manifest["recordings_sha256"] = _sha256_file(recordings)
    manifest["finished"] = True
    _write(path, manifest)


def read_manifest(path: Path) -> dict[str, Any]:
    """``manifest.json`` as a dict.

    Raises:
        ConfigError: It is not a JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # its message names the path again
        raise ConfigError(f"{path}: not a readable manifest ({os_problem(exc)})") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not a readable manifest ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a manifest (a JSON object)")
    scheme = data.get("scheme", MANIFEST_SCHEME)
    if scheme not in READABLE_SCHEMES:
        raise ConfigError(
            f"{path}: run directory format {scheme!r}; simulacra {_version()} reads "
            f"{', '.join(repr(s) for s in READABLE_SCHEMES)} (a run written by a newer "
            "release: replay it with that release)")
    return data


def _version() -> str:
    from simulacra._version import __version__  # noqa: PLC0415

    return str(__version__)


def portable_factory(run_dir: Path, ref: str | None) -> str | None:
    """A ``sim.world.factory`` that exists here: *ref*, or its file found relative to *run_dir*.

    A run directory copied elsewhere keeps the absolute path of the factory's
    file in ``config.yaml``; when that path does not exist, the manifest's
    path relative to the run directory is tried. Returns None when *ref* can
    be used as it is.

    Raises:
        ConfigError: Neither path exists (both are named).
    """
    if not ref:
        return None
    where, _, name = ref.rpartition(":")
    if not (where.endswith(".py") or "/" in where or "\\" in where) or Path(where).is_file():
        return None
    manifest = run_dir / "manifest.json"
    relative = None
    if manifest.is_file():
        relative = (read_manifest(manifest).get("world_factory") or {}).get(
            "file_relative_to_run_dir")
    if relative:
        candidate = (run_dir / relative).resolve()
        if candidate.is_file():
            return f"{candidate}:{name}"
    tried = f" nor {run_dir / relative}" if relative else ""
    raise ConfigError(f"sim.world.factory: neither {where}{tried} exists; copy the model's "
                      "files along with the run directory")


def _write(path: Path, manifest: Mapping[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(dict(manifest), indent=2, sort_keys=True, default=str) + "\n",
                         encoding="utf-8")
    os.replace(temporary, path)
