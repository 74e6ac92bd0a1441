"""The clinic of LLM patients: ``python examples/clinic`` runs it and prints what happened.

Patients queue for the doctors (a ``Resource``), reconsider while they wait
by asking their language model, leave or stay, and talk to each other; the
nurse is a plain SimPy-style process. All of them run on one kernel clock,
so the printed digest is the same in every mode and at every concurrency.

Options: ``--patients N``, ``--doctors N``, ``--seed N``, ``--mode
sequential|threads|asyncio``, ``--concurrency N``; ``--record FILE`` keeps
every completion in a recordings file and ``--replay FILE`` answers from it
(no model call; a call it does not hold is an error). The model is scripted
(no server) unless ``--base-url URL`` names an OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama; with ``--model NAME``, the key from
``$OPENAI_API_KEY``; needs ``python -m pip install '.[llm]'``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra import SimError
from simulacra.llm import OpenAICompatible, RecordingModel, RecordingStore, ReplayModel
from simulacra.societies import KERNEL_AGENT_MODES, check_server

if __package__:
    from .model import Params, params_from, run, scripted_model
else:  # `python examples/clinic`: this directory is on sys.path, not its parent
    from model import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        Params,
        params_from,
        run,
        scripted_model,
    )


def _parser() -> argparse.ArgumentParser:
    defaults = Params()
    parser = argparse.ArgumentParser(
        prog="python examples/clinic",
        description="A walk-in clinic whose patients are LLM agents on the kernel's clock.")
    parser.add_argument("--patients", type=int, default=defaults.patients,
                        help=f"patients who arrive (default {defaults.patients})")
    parser.add_argument("--doctors", type=int, default=defaults.doctors,
                        help=f"doctors seeing patients at once (default {defaults.doctors})")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help=f"the master seed (default {defaults.seed})")
    parser.add_argument("--mode", choices=KERNEL_AGENT_MODES, default="sequential",
                        help="where model calls run (the result is the same)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="model calls in flight at once (threads, asyncio)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server, e.g. "
                        "http://127.0.0.1:8080/v1 (default: the scripted model)")
    parser.add_argument("--model", default=None,
                        help="the server's model name (with --base-url; it must be listed at "
                        "/v1/models)")
    parser.add_argument("--record", type=Path, help="keep every completion in this file")
    parser.add_argument("--replay", type=Path, help="answer every call from this file")
    return parser


def _model(args: argparse.Namespace, params: Params) -> tuple[Any, RecordingStore | None]:
    if args.replay is not None and (args.record is not None or args.base_url):
        raise SimError("--replay answers from a file: it takes no --record or --base-url")
    if args.model and not args.base_url:
        raise SimError("--model names a server's model: give --base-url too (the scripted "
                       "model needs no name)")
    if args.replay is not None:
        if args.replay.is_dir():
            raise SimError(f"--replay {args.replay}: a directory, not a recordings file")
        if not args.replay.is_file():
            raise SimError(f"--replay {args.replay}: no such recordings file")
        if args.replay.stat().st_size == 0:
            raise SimError(f"--replay {args.replay}: the file is empty (no recordings)")
        store = RecordingStore(args.replay, readonly=True)
        return ReplayModel(store), store
    if args.base_url:
        if not args.model:
            raise SimError("--base-url needs --model NAME (one the server lists at /v1/models)")
        if importlib.util.find_spec("httpx") is None:
            raise SimError("--base-url needs the httpx package: "
                           "python -m pip install '.[llm]' in a clone of simulacra")
        # Before the first patient: a run whose calls all fail is not a clinic that ran.
        check_server(args.base_url, args.model, names=("--base-url", "--model"), strict=True)
        inner: Any = OpenAICompatible(args.base_url, args.model, max_retries=2)
    else:
        inner = scripted_model(params.seed)
    if args.record is None:
        return inner, None
    store = RecordingStore(args.record)
    return RecordingModel(inner, store), store


def main(argv: Sequence[str] | None = None) -> int:
    """Run the clinic; 0 on success, 2 on bad input or a failed run (one line)."""
    args = _parser().parse_args(argv)
    try:
        params = params_from(patients=args.patients, doctors=args.doctors, seed=args.seed,
                             model=args.model or "scripted")
        model, store = _model(args, params)
        started = time.perf_counter()
        try:
            result = run(params, model=model, mode=args.mode, concurrency=args.concurrency)
        finally:
            if store is not None:
                store.close()
        wall = time.perf_counter() - started
    except (SimError, OSError, sqlite3.DatabaseError) as exc:
        what = f"{args.replay or args.record}: damaged recordings file ({exc})" if isinstance(
            exc, sqlite3.DatabaseError) else str(exc)
        print(f"error: {what}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = f"; the completions recorded so far are in {args.record}" if args.record else ""
        print(f"clinic: interrupted (Ctrl-C){kept}", file=sys.stderr)
        return 130
    print(f"clinic: {params.patients} patients, {params.doctors} doctors, seed {params.seed} "
          f"({args.mode})")
    rows = [
        ("seen by a doctor", f"{result['served']}"),
        ("left without being seen", f"{result['reneged']}"),
        ("mean wait of those seen", f"{result['mean_wait']:.1f} min"),
        ("remarks in the waiting room", f"{result['remarks']}"),
        ("model calls", f"{result['model_calls']}"),
        ("clinic closed at", f"{result['closed_at']:.1f} min"),
        ("wall clock", f"{wall:.2f} s"),
        ("trace records", f"{result['records']}"),
    ]
    for label, value in rows:
        print(f"  {label:<28} {value}")
    print(f"  digest {result['digest']}")
    if result["board"]:
        print("last words in the waiting room:")
        for at, who, text in result["board"]:
            print(f"  {at:6.1f}  {who}: {text[:56]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
