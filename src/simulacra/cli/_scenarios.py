"""``simulacra scenarios generate`` and ``simulacra scenarios check``: scenarios from documents.

``generate DOCS... --target MODULE:KNOBS --out DIR`` reads the documents,
asks a language model for scenarios that fit the target's knobs (each request
bounded by ``--max-tokens`` and carrying the reply's JSON schema), keeps those
that validate, cite a passage verbatim and ground every value and time, and
writes each as
``DIR/<name>-<hash>.json``. ``--record FILE`` keeps the model's replies;
``--replay FILE`` serves every call from them (no model is called) and
writes the same artifacts, byte for byte. ``check DIR [--docs DOCS...]``
re-validates every artifact of DIR.

Every call a model answers is recorded as it is made (committed before the
next call), in ``FILE.partial`` with ``--record FILE``, else in
``DIR/.generate.sqlite.partial``. A run that completes renames it to FILE (or
removes it); a run that fails after paying for calls keeps it and says so,
and the same command with ``--resume`` serves those calls from it and pays
only for the rest. A failed call is never recorded: a resume calls it again.

Exit status: 0 done; 1 the provider failed (it could not be reached, or
answered with errors after its retries); 130 interrupted; 2 bad input: a document that cannot
be read, a target without knobs, bad options, recordings that do not hold a
call (``--replay``), a model that gave no valid scenario within its tries,
or (``check``) an artifact that fails, named, with what was expected. Nothing
is written unless every scenario was accepted.

Layer 7: the standard library, and ``simulacra.scenarios`` and
``simulacra.llm`` through their public ``__init__``, imported lazily.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulacra._util import install_hint

if TYPE_CHECKING:
    from simulacra.llm import LanguageModel, RecordingStore
    from simulacra.scenarios import Knobs

__all__ = ["add_scenarios_command"]

EXIT_OK = 0
EXIT_PROVIDER = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: The knobs attribute a target names when it names none.
DEFAULT_KNOBS = "KNOBS"

#: ``--max-tokens`` when not given (simulacra.scenarios.DEFAULT_MAX_TOKENS, not imported
#: here: the command line imports the scenarios package lazily).
_DEFAULT_MAX_TOKENS = 1024


class _Failed(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def add_scenarios_command(commands: Any, *, load: Callable[[str], Any],
                          usage_error: type[Exception]) -> None:
    """Add ``scenarios generate`` and ``scenarios check`` to the ``simulacra`` subcommands.

    Args:
        commands: The subparsers of ``simulacra``.
        load: ``load(where)``: a context manager giving the module a file path
            or a module name names (``simulacra run``'s loader).
        usage_error: What *load* raises for a target it cannot find.
    """
    scenarios = commands.add_parser(
        "scenarios",
        help="make scenarios from documents with a language model (design time), check them",
        description="Scenarios from documents, at design time: generate them with a language "
                    "model, grounded in cited passages, and check the artifacts.")
    sub = scenarios.add_subparsers(title="commands", metavar="COMMAND", required=True,
                                   dest="scenarios_command")
    generate = sub.add_parser(
        "generate",
        help="ask a language model for scenarios that fit a model's knobs",
        description=(
            "Read text, Markdown or PDF documents, split them into passages with stable ids, "
            "and ask a language model for scenarios that fit the target's knobs. A scenario "
            "is kept only when it validates, cites a passage with a verbatim quote and "
            "grounds every value and time (in words of its quote that state it, or an "
            "assumption with its reason); otherwise the model is asked again, told why. "
            "Each is written as DIR/<name>-<hash>.json with its provenance. Nothing is "
            "written unless all are accepted."))
    generate.add_argument("docs", nargs="+", metavar="DOCS",
                          help="documents (.md, .txt, .pdf with the [pdf] extra) or directories "
                               "of them")
    generate.add_argument("--target", required=True, metavar="MODULE:KNOBS",
                          help="the model's Knobs: path/to/model.py:KNOBS or package.module:KNOBS "
                               f"(the attribute defaults to {DEFAULT_KNOBS})")
    generate.add_argument("--out", required=True, metavar="DIR",
                          help="the directory the artifacts are written to")
    generate.add_argument("--provider", choices=("extract", "scripted", "openai_compatible"),
                          default="extract",
                          help="extract (default): read the numbers, times and on/off events "
                               "of the documents and ground every value in its quote (no "
                               "model, no server); scripted: a stand-in language model that "
                               "invents values and states them as assumptions (a test double "
                               "of the model loop); openai_compatible: a chat-completions "
                               "server (--base-url, --model)")
    generate.add_argument("--time-unit", default="minute",
                          choices=("second", "minute", "hour", "day"),
                          help="extract: what one unit of the model's virtual time is; clock "
                               "times and durations are converted to it (default minute)")
    generate.add_argument("--base-url", metavar="URL",
                          help="openai_compatible: the API root, e.g. http://127.0.0.1:8000/v1")
    generate.add_argument("--model", metavar="NAME",
                          help="the model name sent (openai_compatible: required; with "
                               "--replay: read from the recordings when not given)")
    generate.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                          help="openai_compatible: the environment variable holding the API key "
                               "(default OPENAI_API_KEY; none is needed on 127.0.0.1)")
    generate.add_argument("--max-tokens", type=int, metavar="N",
                          help="scripted, openai_compatible: the most tokens a reply may take, "
                               "sent with every request and recorded in each artifact's "
                               f"provenance (default {_DEFAULT_MAX_TOKENS}: a grounded scenario "
                               "takes 250-500; a model that rambles is cut off, not waited for)")
    generate.add_argument("--schema-format", choices=("json_schema", "json_object", "none"),
                          help="openai_compatible: how the reply's JSON schema is sent: "
                               "json_schema (default; OpenAI's response_format, vLLM, llama.cpp's "
                               "own server), json_object ({\"type\": \"json_object\", "
                               "\"schema\": ...}: llama-cpp-python's server) or none (no "
                               "schema, for a server that refuses one; the requests differ, so "
                               "a replay must say the same)")
    generate.add_argument("--count", type=int, default=3, metavar="N",
                          help="how many scenarios (default 3)")
    generate.add_argument("--tries", type=int, default=3, metavar="K",
                          help="requests per scenario before giving up (default 3)")
    generate.add_argument("--until", type=float, metavar="T",
                          help="the end of the run in virtual time: interventions start "
                               "before it")
    generate.add_argument("--record", metavar="FILE",
                          help="write the model's replies to this recording store (replaced "
                               "only when every scenario was accepted)")
    generate.add_argument("--replay", metavar="RECORDINGS",
                          help="serve every call from these recordings: no model is called")
    generate.add_argument("--resume", action="store_true",
                          help="continue a run that failed: serve the calls it paid for from "
                               "its partial recording (FILE.partial with --record FILE, else "
                               "DIR/.generate.sqlite.partial) and call the model for the rest")
    generate.set_defaults(command_fn=_cmd_generate, load=load, usage_error=usage_error)

    check = sub.add_parser(
        "check",
        help="re-validate scenario artifacts: schema, hash, citations against the documents",
        description=(
            "Re-validate every artifact (*.json) of DIR: the schema, the hash of its content, "
            "its file name, the knobs (--target) and its citations (--docs: each cited "
            "passage's file, offsets and SHA-256 must match the documents now, and its "
            "quote must be in it). Stops at the first that fails, exit status 2."))
    check.add_argument("dir", metavar="DIR", help="a directory of scenario artifacts")
    check.add_argument("--docs", nargs="+", metavar="DOCS",
                       help="the documents the scenarios cite (as given to generate)")
    check.add_argument("--target", metavar="MODULE:KNOBS",
                       help="also check every intervention against these knobs")
    check.add_argument("--until", type=float, metavar="T",
                       help="with --target: the end of the run")
    check.add_argument("--require-grounding", action="store_true",
                       help="also fail artifacts of generator v1 that ground no value (by "
                            "default they pass with a note)")
    check.set_defaults(command_fn=_cmd_check, load=load, usage_error=usage_error)


# -- shared -------------------------------------------------------------------------------


def _run(body: Any, args: argparse.Namespace) -> int:
    from simulacra.errors import ConfigError, LLMError, ProviderError  # noqa: PLC0415

    try:
        return int(body(args))
    except _Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    except ProviderError as exc:
        print(f"error: the model could not be called: {exc}", file=sys.stderr)
        _print_hint(args)
        return EXIT_PROVIDER
    except (ConfigError, LLMError) as exc:  # ScenarioError, ReplayMiss, RecordingError
        print(f"error: {exc}", file=sys.stderr)
        _print_hint(args)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if not getattr(args, "resume_hint", None):
            raise  # the command line's one line: nothing was paid for
        print("interrupted; no artifact was written", file=sys.stderr)
        _print_hint(args)
        return EXIT_INTERRUPTED


def _print_hint(args: argparse.Namespace) -> None:
    """The ``hint:`` line a failed generation left (how to resume), if any."""
    hint = getattr(args, "resume_hint", None)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)


def _target_name(target: str) -> tuple[str, str, str]:
    """``(where, attribute, the target as artifacts name it)``."""
    where, sep, attr = target.rpartition(":")
    if not sep or not where or "/" in attr or "\\" in attr:
        where, attr = target, DEFAULT_KNOBS
    if not attr.isidentifier():
        raise _Failed(f"--target {target!r}: {attr!r} must be the name of the Knobs object "
                      f"(a Python identifier), e.g. path/to/model.py:{DEFAULT_KNOBS}")
    name = where
    if where.endswith(".py") or "/" in where or "\\" in where or Path(where).exists():
        absolute = Path(os.path.abspath(where))
        with contextlib.suppress(ValueError):  # outside the working directory: as given
            name = absolute.relative_to(Path.cwd()).as_posix()
    return where, attr, f"{name}:{attr}"


def _callable_kind(found: object) -> str:
    if isinstance(found, type):
        return "class"
    return "function" if inspect.isroutine(found) else "callable object"


def _load_knobs(args: argparse.Namespace, target: str) -> tuple[Knobs, str]:
    """The Knobs *target* names, and its name as artifacts give it."""
    from simulacra.scenarios import Knob, Knobs  # noqa: PLC0415

    where, attr, name = _target_name(target)
    try:
        with args.load(where) as module:
            found: object = getattr(module, attr, None)
            public = sorted(n for n, v in vars(module).items() if isinstance(v, Knobs))
            hint = f"; it has {', '.join(public)}" if public else ""
            if found is None:
                raise _Failed(f"--target {target!r}: {where} has no {attr!r}{hint}; expected "
                              "the model's Knobs object")
    except args.usage_error as exc:
        raise _Failed(f"--target {target!r}: {exc}") from None
    # A target is read, never called: `model.py:run` names the model's entry point, and
    # calling it to see what it returns would run the simulation (or anything else it does).
    if callable(found):  # a Knobs is not callable
        raise _Failed(f"--target {target!r}: {attr} is a {_callable_kind(found)}, not a "
                      f"simulacra.scenarios.Knobs (it is not called){hint}; expected the "
                      f"model's Knobs object, e.g. {where}:{DEFAULT_KNOBS}")
    if isinstance(found, list | tuple) and all(isinstance(k, Knob) for k in found):
        found = Knobs(*found)
    if not isinstance(found, Knobs):
        raise _Failed(f"--target {target!r}: {attr} is a {type(found).__name__}, not a "
                      f"simulacra.scenarios.Knobs{hint}")
    if not found:
        raise _Failed(f"--target {target!r}: {attr} declares no knob")
    return found, name


# -- generate -----------------------------------------------------------------------------


def _cmd_generate(args: argparse.Namespace) -> int:
    return _run(_generate, args)


def _check_options(args: argparse.Namespace) -> None:
    if args.count < 1:
        raise _Failed(f"--count must be >= 1, got {args.count}")
    if args.tries < 1:
        raise _Failed(f"--tries must be >= 1, got {args.tries}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise _Failed(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if args.provider == "extract" and args.replay is None and (
            args.max_tokens is not None or args.schema_format is not None):
        raise _Failed("--max-tokens and --schema-format go with a model (--provider scripted or "
                      "openai_compatible); --provider extract calls none")
    if args.until is not None and not args.until > 0:
        raise _Failed(f"--until must be a time > 0, got {args.until}")
    if args.record is not None and args.replay is not None:
        raise _Failed("--record and --replay go apart: --replay makes no model call to record")
    if args.resume and args.replay is not None:
        raise _Failed("--resume and --replay go apart: --replay makes no model call")
    if args.replay is not None:
        if not Path(args.replay).is_file():
            raise _Failed(f"--replay {args.replay!r}: no such recordings file; expected the "
                          "file written by --record")
        return  # the provider options may stay as recorded: no provider is made
    if args.provider == "openai_compatible":
        missing = [flag for flag, value in (("--base-url", args.base_url), ("--model", args.model))
                   if not value]
        if missing:
            raise _Failed(f"--provider openai_compatible needs {' and '.join(missing)} "
                          "(e.g. --base-url http://127.0.0.1:8000/v1 --model NAME)")
        if importlib.util.find_spec("httpx") is None:
            raise _Failed("--provider openai_compatible needs the httpx package, which is not "
                          f"installed: {install_hint('llm')}")
    elif args.base_url is not None:
        raise _Failed("--base-url goes with --provider openai_compatible")
    if args.provider == "extract" and (args.record is not None or args.tries != 3
                                       or args.resume):
        raise _Failed("--record, --resume and --tries go with a model (--provider scripted or "
                      "openai_compatible); --provider extract calls none")


def _recorded_model(store: RecordingStore, path: str) -> str:
    from simulacra.llm import CallSite  # noqa: PLC0415

    for key in store.keys_for(CallSite("scenario-0", 0)):
        request = store.request(key)
        if request is not None:
            return request.model
    raise _Failed(f"--replay {path!r}: the recordings hold no scenario-generation call "
                  "(call site scenario-0/0); expected a file written by `simulacra scenarios "
                  "generate --record`")


class _NoAnswer:
    """*inner*, whose failed calls are never recorded: a failure is not an answer.

    :class:`~simulacra.llm.RecordingModel` keeps a call that failed for good,
    so that a resumed society fails it again at the same place; a generation
    that failed because its server did is resumed to call again. Its errors
    are raised as ``ProviderUnavailable`` (the run stops), which a
    RecordingModel does not record.
    """

    def __init__(self, inner: LanguageModel) -> None:
        self.inner = inner

    def complete(self, request: Any, *, site: Any = None) -> Any:
        from simulacra.errors import ProviderError, ProviderUnavailable  # noqa: PLC0415

        try:
            return self.inner.complete(request, site=site)
        except ProviderUnavailable:
            raise
        except ProviderError as exc:
            raise ProviderUnavailable(str(exc)) from exc

    async def acomplete(self, request: Any, *, site: Any = None) -> Any:
        from simulacra.errors import ProviderError, ProviderUnavailable  # noqa: PLC0415

        try:
            return await self.inner.acomplete(request, site=site)
        except ProviderUnavailable:
            raise
        except ProviderError as exc:
            raise ProviderUnavailable(str(exc)) from exc


def _partial_path(args: argparse.Namespace) -> Path:
    """Where the calls of a run are recorded as they are made."""
    if args.record is not None:
        final = Path(args.record)
        return final.with_name(final.name + ".partial")
    return Path(args.out) / ".generate.sqlite.partial"


def _remove_store(path: Path) -> None:
    for leftover in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
        leftover.unlink(missing_ok=True)


def _paid_calls(path: Path) -> int:
    """The completions recorded in the store at *path* (0 when it holds none)."""
    from simulacra.llm import RecordingStore  # noqa: PLC0415

    store = RecordingStore(path, readonly=True)
    try:
        return len(store)
    finally:
        store.close()


@contextlib.contextmanager
def _model(args: argparse.Namespace) -> Iterator[tuple[LanguageModel, str, str | None]]:
    """The model to call, the model name to send, and the recordings' file name."""
    from simulacra.llm import (  # noqa: PLC0415
        OpenAICompatible,
        RecordingModel,
        RecordingStore,
        ReplayModel,
    )
    from simulacra.scenarios import scripted_scenario_model  # noqa: PLC0415

    if args.replay is not None:
        store = RecordingStore(args.replay, readonly=True)
        try:
            name = args.model or _recorded_model(store, args.replay)
            yield ReplayModel(store, strict=True), name, Path(args.replay).name
        finally:
            store.close()
        return
    partial = _partial_path(args)
    resume_from = _check_resume(args, partial)
    inner: LanguageModel
    if args.provider == "openai_compatible":
        schema_format = "json_schema" if args.schema_format in (None, "none") \
            else args.schema_format
        inner = OpenAICompatible(args.base_url, args.model, api_key_env=args.api_key_env or None,
                                 schema_format=schema_format)
        name = args.model
    else:
        inner = scripted_scenario_model()
        name = args.model or "scripted"
    created = not partial.parent.exists()
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        store = RecordingStore(partial)
        model = RecordingModel(_NoAnswer(inner), store, reuse=True)
        done = False
        try:
            yield model, name, None if args.record is None else Path(args.record).name
            done = True
        finally:
            paid = len(store)
            store.close()
            if done:
                if args.record is None:
                    _remove_store(partial)
                else:
                    _one_file(partial)
                    os.replace(partial, Path(args.record))
            elif paid == 0:  # nothing paid for: leave nothing behind
                _remove_store(partial)
                if created:
                    with contextlib.suppress(OSError):
                        partial.parent.rmdir()
            else:
                _one_file(partial)
                served = f", {model.reused} of them served from it" if resume_from else ""
                args.resume_hint = (
                    f"the {paid} model call{'s' if paid != 1 else ''} paid for so far "
                    f"{'are' if paid != 1 else 'is'} kept in {partial}{served}; run the same "
                    "command with --resume to continue without paying for "
                    f"{'them' if paid != 1 else 'it'} again")
    finally:
        close = getattr(inner, "close", None)
        if callable(close):
            close()


def _check_resume(args: argparse.Namespace, partial: Path) -> bool:
    """Whether a run resumes; refuses to discard calls paid for, or to resume nothing."""
    exists = partial.is_file()
    if args.resume and not exists:
        raise _Failed(f"--resume: there is no run to resume: {partial} does not exist (a "
                      "generate that fails after paying for model calls leaves it)")
    if exists and not args.resume:
        paid = _paid_calls(partial)
        if paid:
            raise _Failed(f"{partial} holds {paid} model call{'s' if paid != 1 else ''} paid "
                          "for by an earlier run that failed; add --resume to continue from "
                          "them, or delete the file to start over")
        _remove_store(partial)
    return exists


def _one_file(path: Path) -> None:
    """Leave the store at *path* in one file (no ``-wal``), to ship and to read read-only.

    A store in WAL mode makes ``-wal`` and ``-shm`` files beside it whenever
    it is opened, even read-only: a replay from a file in a repository would
    leave them in the work tree.
    """
    import sqlite3  # noqa: PLC0415

    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
    finally:
        db.close()


def _generate(args: argparse.Namespace) -> int:
    from simulacra.scenarios import generate_scenarios, read_documents  # noqa: PLC0415

    _check_options(args)
    knobs, target = _load_knobs(args, args.target)
    documents = read_documents(args.docs)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise _Failed(f"--out {args.out!r} is a file; expected a directory for the artifacts")
    if args.provider == "extract" and args.replay is None:
        return _extract(args, knobs, target, documents, out)

    def rejected(index: int, attempt: int, reason: str) -> None:
        print(f"note: scenario {index + 1} of {args.count}, try {attempt + 1} of {args.tries}: "
              f"rejected: {reason}", file=sys.stderr)

    with _model(args) as (model, name, recording):
        try:
            scenarios = generate_scenarios(
                documents, knobs, model, target=target, model_name=name, count=args.count,
                tries=args.tries, until=args.until, recording=recording, on_reject=rejected,
                max_tokens=args.max_tokens or _DEFAULT_MAX_TOKENS,
                schema=args.schema_format != "none")
        except Exception as exc:
            from simulacra.errors import ReplayMiss  # noqa: PLC0415

            if isinstance(exc, ReplayMiss):
                raise _Failed(f"--replay {args.replay!r}: {exc}; the documents, the target's "
                              "knobs or the options (--count, --until, --model, --max-tokens, "
                              "--schema-format none) differ from the recorded run") from None
            raise
    written = [scenario.save(out) for scenario in scenarios]
    passages = sum(len(d.passages()) for d in documents)
    for path in written:
        print(path)
    how = (f"replayed from {args.replay} (no model called)" if args.replay is not None else
           f"model {name}" + (f", recorded in {args.record}" if args.record else ""))
    print(f"{len(written)} scenario{'s' if len(written) != 1 else ''} for {target} from "
          f"{len(documents)} document{'s' if len(documents) != 1 else ''} ({passages} passages), "
          f"{how}")
    others = sorted(p.name for p in out.glob("*.json") if p not in written)
    if others:
        print(f"note: {out} also holds {len(others)} artifact(s) this run did not write "
              f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); remove any that "
              "are stale", file=sys.stderr)
    return EXIT_OK


def _extract(args: argparse.Namespace, knobs: Knobs, target: str, documents: Any,
             out: Path) -> int:
    from simulacra.scenarios import extract_scenarios  # noqa: PLC0415

    scenarios, notes = extract_scenarios(documents, knobs, target=target, count=args.count,
                                         until=args.until, time_unit=args.time_unit)
    written = [scenario.save(out) for scenario in scenarios]
    for path in written:
        print(path)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"{len(written)} scenario{'s' if len(written) != 1 else ''} for {target} from "
          f"{len(documents)} document{'s' if len(documents) != 1 else ''}, extracted (every "
          f"value grounded in its quote; {len(notes)} thing{'s' if len(notes) != 1 else ''} "
          "left out)")
    return EXIT_OK


# -- check --------------------------------------------------------------------------------


def _cmd_check(args: argparse.Namespace) -> int:
    return _run(_check, args)


def _check(args: argparse.Namespace) -> int:
    from simulacra.scenarios import check_artifacts, read_documents  # noqa: PLC0415

    if args.until is not None and args.target is None:
        raise _Failed("--until goes with --target")
    knobs = None if args.target is None else _load_knobs(args, args.target)[0]
    documents = None if args.docs is None else read_documents(args.docs)
    notes: list[str] = []
    scenarios = check_artifacts(args.dir, documents=documents, knobs=knobs, until=args.until,
                                notes=notes, require_grounding=args.require_grounding)
    checked = ["schema", "hash", "file name"]
    if knobs is not None:
        checked.append("knobs")
    checked.append("grounding")
    checked.append("citations" + ("" if documents is None else
                                  f" against {len(documents)} document"
                                  f"{'s' if len(documents) != 1 else ''}"))
    print(f"ok: {len(scenarios)} artifact{'s' if len(scenarios) != 1 else ''} in {args.dir} "
          f"({', '.join(checked)})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if documents is None:
        print("note: the citations were not checked against the documents; give --docs DOCS",
              file=sys.stderr)
    return EXIT_OK
