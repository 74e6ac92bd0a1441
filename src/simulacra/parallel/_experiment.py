"""Replications: a model function run over configs x replications on any executor.

The unit of work is one ``(config_index, replication)``. It crosses to the
worker as data (:class:`Unit`: the model's ``module:qualname``, the master
seed, the two indices and the config) and comes back as a mapping of KPIs.
Results are stored and returned by their key, in identity order, never in
the order they completed; the seed of each replication is a pure function of
``(master_seed, config_index, replication)``, so every backend, worker count
and resumed run gives the same table.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import inspect
import itertools
import json
import logging
import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, final

from simulacra._util import did_you_mean, install_hint, os_problem, plural
from simulacra.errors import (
    BackendUnavailable,
    ConfigError,
    DeterminismError,
    KernelBug,
    PoolClosed,
    ReplicationFailed,
    SpoolError,
    WorkerLost,
)
from simulacra.executors import (
    EXECUTOR_ALIASES,
    Done,
    Executor,
    Lost,
    ProcessExecutor,
    ProgressBar,
    Raised,
    WorkerPool,
    auto_backend,
    callable_ref,
    executor_name,
    get_executor,
    main_script,
)
from simulacra.rng import SeedTree

from ._stats import check_confidence, mean_interval
from ._units import NotKPIs, Unit, model_of, run_unit, stream_for

if TYPE_CHECKING:
    import polars

    from simulacra.scenarios import Scenario

__all__ = [
    "CONVENTIONS",
    "Experiment",
    "ExperimentResults",
    "KPIValue",
    "ReplicationResult",
    "config_grid",
]

_log = logging.getLogger("simulacra.parallel")

#: What a worker imports to run a replication (see _units.py).
_UNITS_MODULE = run_unit.__module__

#: One KPI value as stored, spooled and tabulated.
KPIValue: TypeAlias = bool | int | float | str
#: A key of the results: ``(config_index, replication)``.
Key: TypeAlias = tuple[int, int]

#: How the model function is called, per replication:
#: ``"stream"``: ``model_fn(stream, config)`` with ``stream`` the replication's
#: :class:`~simulacra.SeedTree` node; ``"run"``: ``model_fn(seed=stream.seed,
#: **config)``, the signature of ``simulacra run`` and of the examples.
CONVENTIONS = ("stream", "run")
Convention: TypeAlias = Literal["stream", "run"]

#: Column names the results table uses itself; a config field may not take them.
_RESERVED = frozenset({"config_index", "replication"})

_STUDY_FORMAT = "simulacra.study.v1"
_STUDY_FILE = "study.json"
_RESULTS_FILE = "results.jsonl"


def _source_digest(reference: str) -> str | None:
    """The SHA-256 of the source file that defines the model, or None if there is none.

    Recorded in ``study.json`` so that resuming refuses results of an edited model.
    """
    try:
        model = model_of(reference)
        path = inspect.getsourcefile(model)
    except (ConfigError, TypeError, OSError):
        return None
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _scenarios_of(
    given: str | os.PathLike[str] | Sequence[Scenario | Mapping[str, Any]],
) -> tuple[Scenario, ...]:
    """The scenarios of a study: a directory of artifacts, or a sequence of them.

    Raises:
        ScenarioError: One does not load (see :func:`~simulacra.scenarios.load_scenario`),
            or two share a name.
        ConfigError: *given* is neither.
    """
    # Scenarios are validated by pydantic: imported here, for a study that has
    # them, never by the workers (see _units.py).
    from simulacra.scenarios import Scenario, load_scenario, load_scenarios  # noqa: PLC0415

    if isinstance(given, str | os.PathLike):
        return tuple(load_scenarios(given))
    items: object = given
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(
            "scenarios must be a directory of scenario artifacts or a non-empty list of "
            f"scenarios, got {type(items).__name__} {items!r}")
    loaded = [s if isinstance(s, Scenario) else load_scenario(dict(s)) for s in items]
    names = [s.name for s in loaded]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"scenarios: two are called {twice[0]!r}; names must be unique")
    return tuple(sorted(loaded, key=lambda s: (s.name, s.hash)))


def _check_parameters(reference: str, configs: Sequence[Mapping[str, Any]]) -> None:
    """Check each config against a ``run``-convention model's signature, before any runs.

    A parameter the model does not take, or one it needs and no config gives,
    is a ConfigError naming the config, the key and (for a typo) the closest
    parameter. A model that takes ``**kwargs`` accepts every key.

    Raises:
        ConfigError: A config does not fit the model's parameters.
    """
    model = model_of(reference)
    try:
        signature = inspect.signature(model)
    except (TypeError, ValueError):  # a builtin or C function without a signature
        return
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name != "seed"
    ]
    required = [
        name for name in accepted if params[name].default is inspect.Parameter.empty
    ]
    for index, config in enumerate(configs):
        for key in config:
            if key not in accepted:
                hint = did_you_mean(key, accepted)
                raise ConfigError(
                    f"config {index} sets {key!r}, which model {reference} does not take "
                    f"(its parameters: {', '.join(accepted) or 'none but seed'}){hint}"
                )
        missing = [name for name in required if name not in config]
        if missing:
            raise ConfigError(
                f"config {index} does not set {', '.join(map(repr, missing))}, which model "
                f"{reference} needs (it has no default)"
            )


# -- checking what the user gives us -------------------------------------------------


def _check_json_value(value: object, field: str) -> None:
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json_value(item, f"{field}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{field} keys must be str, got {type(key).__name__} {key!r}")
            _check_json_value(item, f"{field}[{key!r}]")
        return
    raise ConfigError(
        f"{field} must be plain data (None, bool, int, float, str, or lists and str-keyed "
        f"mappings of them), got {type(value).__name__} {value!r}"
    )


def _check_configs(configs: object, convention: str) -> tuple[dict[str, Any], ...]:
    if configs is None:
        return ({},)
    if isinstance(configs, str | bytes | Mapping) or not isinstance(configs, Sequence):
        raise ConfigError(
            "configs must be a sequence of mappings (one per config; see config_grid), got "
            f"{type(configs).__name__} {configs!r}"
        )
    if not configs:
        raise ConfigError("configs must hold at least one config, got an empty sequence")
    checked = []
    for i, config in enumerate(configs):
        field = f"configs[{i}]"
        if not isinstance(config, Mapping):
            raise ConfigError(
                f"{field} must be a mapping of parameter names to values, got "
                f"{type(config).__name__} {config!r}"
            )
        _check_json_value(config, field)
        for key in config:
            if key in _RESERVED:
                raise ConfigError(
                    f"{field} uses the name {key!r}, which the results table keeps for itself; "
                    "rename the parameter"
                )
            if convention == "run" and (not key.isidentifier() or key == "seed"):
                raise ConfigError(
                    f"{field} key {key!r} must be a Python identifier other than 'seed': with "
                    "convention 'run' each field is passed as a keyword argument, beside seed="
                )
        checked.append(copy.deepcopy(dict(config)))
    return tuple(checked)


def _check_master_seed(master_seed: object) -> int | str | bytes:
    return SeedTree(master_seed).master_seed  # type: ignore[arg-type]  # validates, names the field


def _check_replications(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"replications must be an int >= 1, got {type(value).__name__} {value!r}")
    return value


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _seed_json(master_seed: int | str | bytes) -> object:
    if isinstance(master_seed, bytes):
        return {"bytes": master_seed.hex()}
    return master_seed


def _replication_failed(message: str, key: Key) -> ReplicationFailed:
    exc = ReplicationFailed(message)
    exc.config_index, exc.replication = key
    return exc


def _checked_kpis(result: object, model: str, key: Key) -> dict[str, KPIValue]:
    """Check a model's return value against the KPI contract and normalise it.

    Raises:
        ReplicationFailed: The value breaks the contract.
    """
    where = f"model {model} (config {key[0]}, replication {key[1]})"
    if isinstance(result, NotKPIs) or not isinstance(result, Mapping):
        name = result.type_name if isinstance(result, NotKPIs) else type(result).__name__
        hint = (
            ": return a dict of KPIs computed from the run, e.g. "
            "{'mean_wealth': ..., 'steps': result.steps}"
            if name == "RunResult"
            else ""
        )
        raise _replication_failed(
            f"{where} returned {name}, expected a mapping of KPI names (str) "
            f"to int, float, bool or str{hint}",
            key,
        )
    kpis: dict[str, KPIValue] = {}
    for name, value in result.items():
        if not isinstance(name, str) or name in _RESERVED:
            raise _replication_failed(
                f"{where} returned KPI name {name!r}, expected a str other than "
                f"{' and '.join(sorted(_RESERVED))}",
                key,
            )
        if not isinstance(value, bool | int | float | str) and callable(
            getattr(value, "item", None)
        ):
            try:  # a numpy scalar (numpy.bool_ is not a numbers.Integral)
                value = value.item()
            except Exception:  # noqa: S110  (an array, say: refused just below)
                pass
        if isinstance(value, bool | str):
            kpis[name] = value
        elif isinstance(value, numbers.Integral):
            kpis[name] = int(value)
        elif isinstance(value, numbers.Real):
            kpis[name] = float(value)
        else:
            raise _replication_failed(
                f"{where} returned KPI {name!r} = {value!r} ({type(value).__name__}), "
                "expected an int, float, bool or str",
                key,
            )
    return kpis


# -- the study directory (spool) -----------------------------------------------------


class _Spool:
    """A study directory: ``study.json`` (who the study is) and ``results.jsonl``.

    Each finished replication is appended to ``results.jsonl`` as one JSON line
    and flushed and fsynced before the next is taken, so a study killed at any
    moment keeps everything it had finished. A line cut short by the kill is
    dropped when the study is opened again.
    """

    def __init__(self, directory: Path, identity: dict[str, Any], resume: bool) -> None:
        self.directory = directory
        self._identity = identity
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"spool_dir must be a directory simulacra can create and write, got "
                f"{str(directory)!r} ({exc.strerror or exc})"
            ) from exc
        study, results = directory / _STUDY_FILE, directory / _RESULTS_FILE
        if study.exists():
            self._check_identity(study)
        elif results.exists():
            raise SpoolError(
                f"spool_dir {str(directory)!r} holds {_RESULTS_FILE} but no {_STUDY_FILE}, so "
                "whose results they are is unknown; use another directory"
            )
        else:
            self._write_study(study)
        self.done = self._load(results)
        if self.done and not resume:
            raise ConfigError(
                f"resume is False, but spool_dir {str(directory)!r} already holds "
                f"{plural(len(self.done), 'finished replication')} of this study; pass "
                "resume=True to keep them and run only the rest, or use an empty spool_dir"
            )
        self._file = results.open("ab")

    def _write_study(self, study: Path) -> None:
        text = json.dumps(self._identity, indent=2, ensure_ascii=True) + "\n"
        partial = study.with_name(study.name + ".partial")
        with partial.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        partial.replace(study)
        _fsync_directory(study.parent)

    def _check_identity(self, study: Path) -> None:
        try:
            found = json.loads(study.read_text(encoding="utf-8"))
        except OSError as exc:  # its message names the path again
            raise SpoolError(f"{str(study)!r} cannot be read as a study: "
                             f"{os_problem(exc)}") from exc
        except ValueError as exc:
            raise SpoolError(f"{str(study)!r} cannot be read as a study: {exc}") from exc
        if not isinstance(found, dict) or found.get("format") != _STUDY_FORMAT:
            raise SpoolError(
                f"{str(study)!r} is not a simulacra study ({_STUDY_FORMAT}); use another spool_dir"
            )
        for field in (
            "model",
            "convention",
            "master_seed",
            "common_random_numbers",
            "configs_digest",
        ):
            if found.get(field) != self._identity[field]:
                what = "configs" if field == "configs_digest" else field
                raise SpoolError(
                    f"spool_dir {str(study.parent)!r} holds a different study: its {what} is "
                    f"{_shown(found, field)}, this study's is {_shown(self._identity, field)}; "
                    "use another spool_dir for this study"
                )
        source = found.get("model_source_sha256")  # absent in studies of earlier versions
        mine = self._identity.get("model_source_sha256")
        if source is not None and mine is not None and source != mine:
            raise SpoolError(
                f"spool_dir {str(study.parent)!r} holds results of another version of the "
                f"model: the source file of {self._identity['model']} changed since they "
                "were made (its SHA-256 differs), and mixing them would average two models; "
                "run the study again in another spool_dir, or empty this one to run it there "
                "afresh"
            )

    def _load(self, results: Path) -> dict[Key, dict[str, KPIValue]]:
        done: dict[Key, dict[str, KPIValue]] = {}
        if not results.exists():
            return done
        data = results.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line cut short when the study was killed: drop it
            with results.open("r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())
        for number, line in enumerate(data[:end].splitlines(), start=1):
            key, kpis = self._parse(line, results, number)
            previous = done.setdefault(key, kpis)
            if previous != kpis and not _same_kpis(previous, kpis):
                raise DeterminismError(
                    f"{str(results)!r} holds two different results for config {key[0]}, "
                    f"replication {key[1]} (line {number}): {previous!r} and {kpis!r}"
                )
        return done

    @staticmethod
    def _parse(line: bytes, results: Path, number: int) -> tuple[Key, dict[str, KPIValue]]:
        try:
            record = json.loads(line)
            key = (record["config_index"], record["replication"])
            kpis = record["kpis"]
            if not (
                all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in key)
                and isinstance(kpis, dict)
                and all(isinstance(v, bool | int | float | str) for v in kpis.values())
            ):
                raise ValueError("unexpected field types")
        except (ValueError, KeyError, TypeError) as exc:
            raise SpoolError(
                f"{str(results)!r} line {number} is not a result record ({exc}); the study "
                "directory is damaged"
            ) from exc
        return (key[0], key[1]), kpis

    def append(self, key: Key, kpis: Mapping[str, KPIValue]) -> None:
        record = {"config_index": key[0], "replication": key[1], "kpis": kpis}
        self._file.write((json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _shown(identity: Mapping[str, Any], field: str) -> str:
    value = identity.get(field)
    return f"digest {str(value)[:12]}..." if field == "configs_digest" else repr(value)


def _same_kpis(a: Mapping[str, KPIValue], b: Mapping[str, KPIValue]) -> bool:
    """Equality that counts NaN equal to NaN (a KPI may legitimately be NaN)."""
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        if not both_nan and (type(x) is not type(y) or x != y):
            return False
    return True


def _fsync_directory(directory: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover (directories cannot be opened there)
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- results -------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True, eq=True)
class ReplicationResult:
    """The KPIs of one replication, with its key and config."""

    #: Position of the config in the study's ``configs``.
    config_index: int
    #: The replication number, from 0.
    replication: int
    #: The config this replication ran with (read-only).
    config: Mapping[str, Any]
    #: KPI name -> value, in the order the model returned them (read-only).
    kpis: Mapping[str, KPIValue]

    @property
    def key(self) -> Key:
        """``(config_index, replication)``."""
        return (self.config_index, self.replication)


def _is_scenario(value: Mapping[str, Any]) -> bool:
    """Whether a config value is a scenario's artifact (its column is its name)."""
    if "format" not in value:  # most are not: no need to import the scenarios (pydantic)
        return False
    from simulacra.scenarios import SCENARIO_FORMAT  # noqa: PLC0415

    return bool(value.get("format") == SCENARIO_FORMAT)


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted columns; lists become their JSON text."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and _is_scenario(value):
            flat[name] = value.get("name")  # a scenario's column is its name
        elif isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = json.dumps(value, separators=(",", ":"))
        else:
            flat[name] = value
    return flat


_INT64 = (-(2**63), 2**63 - 1)


def _series(pl: Any, name: str, values: Sequence[Any]) -> Any:
    """One column with a dtype chosen from its values (documented on ExperimentResults.table)."""
    present = [v for v in values if v is not None]
    kinds = {bool if isinstance(v, bool) else type(v) for v in present}
    if kinds <= {bool}:
        return pl.Series(name, values, dtype=pl.Boolean)
    if kinds <= {int} and all(_INT64[0] <= v <= _INT64[1] for v in present):
        return pl.Series(name, values, dtype=pl.Int64)
    if kinds <= {int, float}:
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


class TablesNeedPolars(UserWarning):
    """A study runs without polars installed: its records are kept, its tables cannot be made."""


def _warn_without_polars() -> None:
    """Say before the first replication that ``table()`` and ``summary()`` will need polars.

    A study's results are records and need nothing; its tables do. A user who meets
    the missing package only at ``summary()``, after every replication ran, learns it
    an hour late.
    """
    if importlib.util.find_spec("polars") is None:
        warnings.warn(
            "results.table() and results.summary() need polars, which is not installed "
            f"({install_hint('parallel')}); the replications run and their records are kept",
            TablesNeedPolars, stacklevel=3)


def _import_polars() -> Any:
    try:
        import polars  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            f"results tables need polars, which is not installed: {install_hint('parallel')}"
            " (the results stay available as .records)"
        ) from None
    return polars


#: Backends that run a function of the study's own script: in this process, or in
#: worker processes that import the script as multiprocessing does (without its
#: ``if __name__ == "__main__":`` block).
_MAIN_FILE_BACKENDS = ("sequential", "threads", "processes")


def _check_main_model(model: str, backend: str) -> None:
    """Refuse a model of the study's own script on a backend that cannot import it.

    Raises:
        BackendUnavailable: One line naming the backends that can run it.
    """
    kind = main_script(model)
    if kind is None:
        return
    if kind == "session" and backend not in ("sequential", "threads"):
        raise BackendUnavailable(
            f"model_fn {model!r} is defined in an interactive session (or a script read "
            f"from stdin), which backend {backend!r} cannot import: run it with backend="
            "'sequential' or 'threads', or save it in a file")
    if kind == "file" and backend not in _MAIN_FILE_BACKENDS:
        raise BackendUnavailable(
            f"model_fn {model!r} is a function of the study's own script, which backend "
            f"{backend!r} does not import as multiprocessing does: run it with backend="
            "'sequential', 'threads' or 'processes', or move it into a module")


@final
class ExperimentResults:
    """The results of a study, in identity order ``(config_index, replication)``.

    Index it by key (``results[1, 4]`` gives that replication's KPIs), iterate
    it for :class:`ReplicationResult` records, or turn it into a polars table
    with :meth:`table` and :meth:`summary`.
    """

    __slots__ = (
        "_backend",
        "_backend_reason",
        "_configs",
        "_master_seed",
        "_model",
        "_records",
        "_replications",
        "_resumed",
    )

    def __init__(
        self,
        *,
        model: str,
        configs: Sequence[Mapping[str, Any]],
        replications: int,
        master_seed: int | str | bytes,
        backend: str,
        backend_reason: str,
        results: Mapping[Key, Mapping[str, KPIValue]],
        resumed: int,
    ) -> None:
        self._model = model
        self._configs = tuple(MappingProxyType(dict(c)) for c in configs)
        self._replications = replications
        self._master_seed = master_seed
        self._backend = backend
        self._backend_reason = backend_reason
        self._resumed = resumed
        self._records = tuple(
            ReplicationResult(
                key[0], key[1], self._configs[key[0]], MappingProxyType(dict(results[key]))
            )
            for key in sorted(results)
        )

    @property
    def model(self) -> str:
        """The model function's reference, ``module:qualname`` or ``/path/file.py:qualname``."""
        return self._model

    @property
    def configs(self) -> tuple[Mapping[str, Any], ...]:
        """The study's configs, by index (read-only)."""
        return self._configs

    @property
    def replications(self) -> int:
        """Replications per config."""
        return self._replications

    @property
    def master_seed(self) -> int | str | bytes:
        """The study's master seed."""
        return self._master_seed

    @property
    def backend(self) -> str:
        """The executor that ran the study, e.g. ``"processes"`` (what ``"auto"`` picked)."""
        return self._backend

    @property
    def backend_reason(self) -> str:
        """Why that executor: ``"auto: ..."`` when chosen automatically, else ``"requested"``."""
        return self._backend_reason

    @property
    def resumed(self) -> int:
        """How many results were read back from the study directory instead of being run."""
        return self._resumed

    @property
    def records(self) -> tuple[ReplicationResult, ...]:
        """Every replication's result, in identity order."""
        return self._records

    @property
    def kpi_names(self) -> tuple[str, ...]:
        """Every KPI name, in the order first seen in identity order."""
        return tuple(dict.fromkeys(name for r in self._records for name in r.kpis))

    def keys(self) -> list[Key]:
        """The ``(config_index, replication)`` keys, in identity order."""
        return [r.key for r in self._records]

    def __getitem__(self, key: Key) -> Mapping[str, KPIValue]:
        config_index, replication = key
        index = config_index * self._replications + replication
        if not (0 <= config_index < len(self._configs) and 0 <= replication < self._replications):
            raise KeyError(key)
        return self._records[index].kpis

    def __iter__(self) -> Iterator[ReplicationResult]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return (
            f"<ExperimentResults {self._model}: {len(self._configs)} configs x "
            f"{self._replications} replications on {self._backend}>"
        )

    def table(self) -> polars.DataFrame:
        """One row per replication, in identity order.

        Columns: ``config_index``, ``replication``, the config's fields
        (nested mappings flattened to dotted names, lists as JSON text), then
        every KPI. A column's dtype follows its values: Boolean, Int64,
        Float64 for ints mixed with floats, else String (each value as
        ``str``). A KPI missing from a replication is null.

        Raises:
            ConfigError: polars is not installed, or a KPI has the name of a
                config field (rename one of them).
        """
        pl = _import_polars()
        flat = [_flatten(c) for c in self._configs]
        fields = list(dict.fromkeys(name for f in flat for name in f))
        kpis = self.kpi_names
        clash = sorted(set(fields) & set(kpis))
        if clash:
            raise ConfigError(
                f"KPI {clash[0]!r} has the name of a config field, so the table cannot hold "
                "both; rename the KPI or the parameter (the results stay available as .records)"
            )
        columns = [
            pl.Series("config_index", [r.config_index for r in self._records], dtype=pl.Int64),
            pl.Series("replication", [r.replication for r in self._records], dtype=pl.Int64),
        ]
        columns += [
            _series(pl, name, [flat[r.config_index].get(name) for r in self._records])
            for name in fields
        ]
        columns += [_series(pl, name, [r.kpis.get(name) for r in self._records]) for name in kpis]
        frame: polars.DataFrame = pl.DataFrame(columns)
        return frame

    def summary(self, confidence: float = 0.95) -> polars.DataFrame:
        """Mean and Student-t confidence interval of each numeric KPI, per config.

        One row per (config, KPI) in identity order, with columns
        ``config_index``, the config's fields, ``kpi``, ``n``, ``mean``,
        ``std`` (sample), ``halfwidth``, ``ci_low`` and ``ci_high``. The
        interval is ``mean +- t_{(1+confidence)/2, n-1} * std / sqrt(n)``
        (see :func:`simulacra.parallel.t_quantile`); with one replication it
        is NaN. KPIs that are bool or str are left out; a NaN value makes
        its config's row NaN.

        Raises:
            ConfigError: polars is not installed, or *confidence* is not in (0, 1).
        """
        check_confidence(confidence)
        pl = _import_polars()
        flat = [_flatten(c) for c in self._configs]
        fields = list(dict.fromkeys(name for f in flat for name in f))
        numeric = [
            name
            for name in self.kpi_names
            if all(
                isinstance(r.kpis.get(name), int | float) and not isinstance(r.kpis.get(name), bool)
                for r in self._records
                if name in r.kpis
            )
        ]
        rows: list[dict[str, Any]] = []
        for config_index in range(len(self._configs)):
            records = [r for r in self._records if r.config_index == config_index]
            for name in numeric:
                values = [float(r.kpis[name]) for r in records if name in r.kpis]
                if not values:
                    continue
                interval = mean_interval(values, confidence)
                rows.append(
                    {
                        "config_index": config_index,
                        **{f: flat[config_index].get(f) for f in fields},
                        "kpi": name,
                        "n": interval.n,
                        "mean": interval.mean,
                        "std": interval.std,
                        "halfwidth": interval.halfwidth,
                        "ci_low": interval.low,
                        "ci_high": interval.high,
                    }
                )
        names = [
            "config_index",
            *fields,
            "kpi",
            "n",
            "mean",
            "std",
            "halfwidth",
            "ci_low",
            "ci_high",
        ]
        frame: polars.DataFrame = pl.DataFrame(
            [_series(pl, name, [row.get(name) for row in rows]) for name in names]
        )
        return frame

    def scenario_effects(self, confidence: float = 0.95) -> polars.DataFrame:
        """Each scenario's effect on each numeric KPI: its mean and difference from baseline.

        For a study with scenarios (``Experiment(..., scenarios=...)``). One
        row per (config, scenario, KPI), the baseline included, in identity
        order, with columns: the config's fields (``scenario`` is the
        scenario's name, ``"baseline"`` for the baseline), ``kpi``, ``n``,
        ``mean``, ``halfwidth``, ``ci_low``, ``ci_high``, then
        ``difference`` (the mean of ``scenario - baseline`` over
        replications), ``diff_halfwidth``, ``diff_low`` and ``diff_high``.
        Replication *r* of a scenario uses the seeds of replication *r* of its
        baseline, so the differences are paired: their interval is the
        Student-t interval of the per-replication differences, narrower than
        the two intervals side by side. The baseline's difference is 0.

        Raises:
            ConfigError: The study has no scenarios, polars is not installed,
                or *confidence* is not in (0, 1).
        """
        check_confidence(confidence)
        if not any(isinstance(c.get("scenario"), Mapping) for c in self._configs):
            raise ConfigError("scenario_effects() is for a study with scenarios: "
                              "Experiment(..., scenarios=DIR)")
        pl = _import_polars()
        flat = [_flatten(c) for c in self._configs]
        fields = list(dict.fromkeys(name for f in flat for name in f))
        groups: dict[str, int] = {}  # a config without its scenario -> its baseline's index
        for index, config in enumerate(self._configs):
            if config.get("scenario") is None:
                rest = {k: v for k, v in config.items() if k != "scenario"}
                groups[_canonical_json(rest)] = index
        by_config: dict[int, dict[int, Mapping[str, KPIValue]]] = {}
        for record in self._records:
            by_config.setdefault(record.config_index, {})[record.replication] = record.kpis
        numeric = [name for name in self.kpi_names
                   if all(isinstance(r.kpis.get(name), int | float)
                          and not isinstance(r.kpis.get(name), bool)
                          for r in self._records if name in r.kpis)]
        rows: list[dict[str, Any]] = []
        for index, config in enumerate(self._configs):
            rest = {k: v for k, v in config.items() if k != "scenario"}
            baseline = by_config.get(groups[_canonical_json(rest)], {})
            mine = by_config.get(index, {})
            for name in numeric:
                values = [float(k[name]) for _, k in sorted(mine.items()) if name in k]
                if not values:
                    continue
                paired = [float(k[name]) - float(baseline[r][name])
                          for r, k in sorted(mine.items()) if name in k
                          and r in baseline and name in baseline[r]]
                interval = mean_interval(values, confidence)
                diff = mean_interval(paired, confidence) if paired else None
                row = {**{f: flat[index].get(f) for f in fields}, "kpi": name,
                       "n": interval.n, "mean": interval.mean,
                       "halfwidth": interval.halfwidth, "ci_low": interval.low,
                       "ci_high": interval.high}
                if row.get("scenario") is None:
                    row["scenario"] = "baseline"
                row.update({"difference": diff.mean if diff else math.nan,
                            "diff_halfwidth": diff.halfwidth if diff else math.nan,
                            "diff_low": diff.low if diff else math.nan,
                            "diff_high": diff.high if diff else math.nan})
                rows.append(row)
        names = [*fields, "kpi", "n", "mean", "halfwidth", "ci_low", "ci_high", "difference",
                 "diff_halfwidth", "diff_low", "diff_high"]
        frame: polars.DataFrame = pl.DataFrame(
            [_series(pl, name, [row.get(name) for row in rows]) for name in names])
        return frame

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`table` to *path* as CSV (floats in their shortest exact form)."""
        self.table().write_csv(Path(path))

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`table` to *path* as Parquet."""
        self.table().write_parquet(Path(path))


# -- the study -----------------------------------------------------------------------


def config_grid(
    axes: Mapping[str, Sequence[Any]] | None = None, /, **more: Sequence[Any]
) -> list[dict[str, Any]]:
    """Return every combination of the given parameter values, as a list of configs.

    ``config_grid(servers=[2, 3], rate=[1.0, 2.0])`` gives four configs; the
    first parameter varies slowest (``itertools.product`` order), so config
    indices are stable as long as the axes are.

    Args:
        axes: Parameter name -> the values it takes (for names that are not
            Python identifiers).
        **more: More parameters, as keywords.

    Raises:
        ConfigError: A parameter has no values, its values are not a list, or
            it is given twice.
    """
    merged: dict[str, Sequence[Any]] = {}
    for source in (axes or {}, more):
        for name, values in source.items():
            if name in merged:
                raise ConfigError(f"config_grid parameter {name!r} is given twice")
            if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
                raise ConfigError(
                    f"config_grid parameter {name!r} must be a list of values, got "
                    f"{type(values).__name__} {values!r}"
                )
            if not values:
                raise ConfigError(f"config_grid parameter {name!r} must have at least one value")
            merged[name] = values
    names = list(merged)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*merged.values())]


@final
class Experiment:
    """A study: a model function run for every config, *replications* times each.

    The model function runs once per ``(config_index, replication)``, with a
    random stream derived from ``(master_seed, config_index, replication)``
    alone, so the results are the same on every backend and worker count::

        def model(stream: SeedTree, config: dict) -> dict:
            sim = Sim(seed=stream)           # or stream.stream("arrivals"), ...
            ...
            return {"mean_wait": ..., "served": ...}

        study = Experiment(model, config_grid(servers=[2, 3]), master_seed=7)
        results = study.run(replications=20)   # backend="auto": processes on a GIL build
        results.summary()                      # mean and 95% CI per config and KPI

    **What the model gets** (convention ``"stream"``, the default):
    ``model_fn(stream, config)``, where ``stream`` is the replication's
    :class:`~simulacra.SeedTree` node, ``SeedTree(master_seed).config(i)
    .replication(r)``: pass it as ``Sim(seed=stream)`` or draw named streams
    from it with ``stream.stream(name)``; ``config`` is a fresh copy of the
    config. With convention ``"run"`` (or :meth:`from_run`) the model is
    called as ``model_fn(seed=stream.seed, **config)``: the signature of
    ``simulacra run`` and of the examples' ``run`` functions, with ``seed`` the
    node's 128-bit integer seed. It returns a mapping of KPI names (str) to
    int, float, bool or str.

    With ``common_random_numbers=True`` the node is
    ``SeedTree(master_seed).replication(r)`` for every config: replication
    *r* of each config sees the same draws, which narrows the noise on
    differences between configs.

    **The model must be importable by name** (it runs in other processes):
    a module-level function, given as the function itself or as
    ``"package.module:function"`` or ``"path/to/file.py:function"``. Lambdas,
    closures and bound methods are refused when the Experiment is built. A
    function of the study's own script (``__main__``) runs on sequential,
    threads and processes (whose workers import the script as multiprocessing
    does, so the script needs its ``if __name__ == "__main__":`` guard); the
    other backends refuse it when the study runs.

    **Nothing is lost.** With a *spool_dir*, each finished replication is
    appended to ``spool_dir/results.jsonl`` (flushed and fsynced) as it
    arrives, beside ``study.json``, which records the study's identity (model,
    convention, master seed, configs digest). ``run(..., resume=True)`` reads
    back what is there and runs only the rest; a directory of a different
    study is refused (:class:`~simulacra.SpoolError`).

    Args:
        model_fn: The model function, or its reference string.
        configs: The configs, each a mapping of plain data (``None`` means one
            empty config). See :func:`config_grid`.
        master_seed: The study's master seed (int, str or bytes).
        spool_dir: A directory in which to spool results as they finish, or
            ``None`` to keep them in memory only.
        convention: ``"stream"`` or ``"run"``, as above.
        common_random_numbers: Share each replication's stream across configs.

    Raises:
        ConfigError: An argument is invalid; the message names it, says what
            was given and what is expected.
    """

    __slots__ = ("_common", "_configs", "_convention", "_master_seed", "_model", "_scenarios",
                 "_spool_dir", "_streams")

    def __init__(
        self,
        model_fn: Callable[..., Mapping[str, Any]] | str,
        configs: Sequence[Mapping[str, Any]] | None = None,
        *,
        master_seed: int | str | bytes,
        spool_dir: str | os.PathLike[str] | None = None,
        convention: Convention = "stream",
        common_random_numbers: bool = False,
        scenarios: str | os.PathLike[str] | Sequence[Scenario | Mapping[str, Any]] | None = None,
    ) -> None:
        if convention not in CONVENTIONS:
            raise ConfigError(
                f"convention must be 'stream' (model_fn(stream, config)) or 'run' "
                f"(model_fn(seed=..., **config)), got {convention!r}"
            )
        if not isinstance(common_random_numbers, bool):
            raise ConfigError(
                f"common_random_numbers must be a bool, got {common_random_numbers!r}"
            )
        # A function of the study's own script is fine: each backend that runs it
        # imports the script as multiprocessing does (see _check_main_model).
        self._model = callable_ref(model_fn, "model_fn", main=True)
        self._convention: str = convention
        self._configs = _check_configs(configs, convention)
        self._master_seed = _check_master_seed(master_seed)
        if spool_dir is not None and not isinstance(spool_dir, str | os.PathLike):
            raise ConfigError(
                f"spool_dir must be a path or None, got {type(spool_dir).__name__} {spool_dir!r}"
            )
        self._spool_dir = None if spool_dir is None else Path(spool_dir)
        self._common = common_random_numbers
        self._streams = tuple(range(len(self._configs)))
        self._scenarios: tuple[Scenario, ...] = ()
        if scenarios is not None:
            self._with_scenarios(_scenarios_of(scenarios))

    def _with_scenarios(self, scenarios: tuple[Scenario, ...]) -> None:
        """Expand every config into its baseline and one config per scenario."""
        expanded: list[dict[str, Any]] = []
        streams: list[int] = []
        for index, config in enumerate(self._configs):
            if "scenario" in config:
                raise ConfigError(
                    f"configs[{index}] sets 'scenario', which a study with scenarios sets "
                    "itself (None for the baseline, then each scenario's artifact)")
            for scenario in (None, *scenarios):
                data = None if scenario is None else json.loads(scenario.artifact())
                expanded.append({**config, "scenario": data})
                streams.append(index)
        self._configs = tuple(expanded)
        self._streams = tuple(streams)
        self._scenarios = scenarios

    @classmethod
    def from_run(
        cls,
        run: Callable[..., Mapping[str, Any]] | str,
        configs: Sequence[Mapping[str, Any]] | None = None,
        *,
        master_seed: int | str | bytes,
        spool_dir: str | os.PathLike[str] | None = None,
        common_random_numbers: bool = False,
        scenarios: str | os.PathLike[str] | Sequence[Scenario | Mapping[str, Any]] | None = None,
    ) -> Experiment:
        """Build a study of a ``run(seed=..., **params)`` function, such as the examples'.

        Each replication calls ``run(seed=stream.seed, **config)``.
        Equivalent to ``Experiment(run, configs, ..., convention="run")``::

            Experiment.from_run("examples/bank.py:run", [{"servers": 3}], master_seed=1)
        """
        return cls(
            run,
            configs,
            master_seed=master_seed,
            spool_dir=spool_dir,
            convention="run",
            common_random_numbers=common_random_numbers,
            scenarios=scenarios,
        )

    @property
    def scenarios(self) -> tuple[Scenario, ...]:
        """The study's scenarios (each config runs as its baseline, then under each one)."""
        return self._scenarios

    @property
    def model(self) -> str:
        """The model function's reference: ``module:qualname`` or ``/abs/path.py:qualname``."""
        return self._model

    @property
    def convention(self) -> str:
        """How the model is called: ``"stream"`` or ``"run"``."""
        return self._convention

    @property
    def configs(self) -> tuple[dict[str, Any], ...]:
        """A copy of the configs, by index."""
        return copy.deepcopy(self._configs)

    @property
    def master_seed(self) -> int | str | bytes:
        """The study's master seed."""
        return self._master_seed

    @property
    def spool_dir(self) -> Path | None:
        """The study directory, if results are spooled."""
        return self._spool_dir

    @property
    def identity(self) -> dict[str, Any]:
        """What makes this study this study: the content of ``study.json``."""
        configs = [_canonical_json(c) for c in self._configs]
        return {
            "format": _STUDY_FORMAT,
            "model": self._model,
            "convention": self._convention,
            "master_seed": _seed_json(self._master_seed),
            "common_random_numbers": self._common,
            "configs_digest": hashlib.sha256("\n".join(configs).encode("utf-8")).hexdigest(),
            "model_source_sha256": _source_digest(self._model),
            "configs": [json.loads(c) for c in configs],
            **({"scenarios": {s.name: s.hash for s in self._scenarios}} if self._scenarios
               else {}),
        }

    def stream(self, config_index: int, replication: int) -> SeedTree:
        """Return the seed-tree node that replication *replication* of config *config_index* gets.

        Raises:
            ConfigError: An index is out of range.
        """
        self._check_key(config_index, replication)
        return stream_for(self._master_seed, self._streams[config_index], replication,
                           self._common)

    def run_one(self, config_index: int, replication: int) -> dict[str, KPIValue]:
        """Run one replication here, in this thread, and return its KPIs (not spooled).

        It gives exactly what :meth:`run` gives for that key: use it to step
        through one replication in a debugger.

        Raises:
            ConfigError: An index is out of range.
            ReplicationFailed: The model broke the KPI contract.
        """
        self._check_key(config_index, replication)
        if self._convention == "run":
            _check_parameters(self._model, [self._configs[config_index]])
        result = run_unit(self._unit(config_index, replication))
        return _checked_kpis(result, self._model, (config_index, replication))

    def _check_key(self, config_index: object, replication: object) -> None:
        if (
            isinstance(config_index, bool)
            or not isinstance(config_index, int)
            or not (0 <= config_index < len(self._configs))
        ):
            raise ConfigError(
                f"config_index must be an int in [0, {len(self._configs)}), got {config_index!r}"
            )
        if isinstance(replication, bool) or not isinstance(replication, int) or replication < 0:
            raise ConfigError(f"replication must be an int >= 0, got {replication!r}")

    def _unit(self, config_index: int, replication: int) -> Unit:
        return Unit(
            self._model,
            self._convention,
            self._master_seed,
            config_index,
            replication,
            self._configs[config_index],
            self._common,
            self._streams[config_index],
        )

    def run(
        self,
        replications: int,
        backend: str | Executor = "auto",
        max_workers: int | None = None,
        *,
        scheduler_address: str | None = None,
        retries: int = 3,
        resume: bool = False,
        progress: bool | None = None,
        pool: WorkerPool | None = None,
    ) -> ExperimentResults:
        """Run every config *replications* times and return the results in identity order.

        Args:
            replications: Replications per config (>= 1).
            backend: ``"auto"`` (processes on a GIL build, threads on a
                free-threaded one), ``"sequential"``, ``"threads"``,
                ``"processes"``, ``"interpreters"`` (Python 3.13, 3.14+) or
                ``"dask"``; or an :class:`~simulacra.executors.Executor` you
                created, which is used and left open. The choice is logged on
                the ``simulacra.parallel`` logger, shown on the progress bar
                and kept in :attr:`ExperimentResults.backend`.
            max_workers: Workers for a backend given by name (``None``: one
                per CPU; for Dask without *scheduler_address*, the
                ``LocalCluster`` size).
            scheduler_address: For ``backend="dask"``: a running scheduler
                to use instead of starting a ``LocalCluster``.
            retries: How many times a replication whose worker died (a killed
                process, a lost Dask worker) is run again. An exception raised
                by the model is never retried.
            resume: Keep the results already in ``spool_dir`` and run only
                the rest. Without it, a spool_dir holding results is refused.
            progress: Show a progress bar with an ETA on stderr. ``None``: only
                when stderr is a terminal.
            pool: A :class:`~simulacra.WorkerPool` to run the replications on
                (backend ``"processes"``): its workers are borrowed for this
                run and left running for the next, so that several studies
                pay the process start-up once. *max_workers* is then the pool's.

        Returns:
            The results, keyed and ordered by ``(config_index, replication)``.

        Raises:
            ConfigError: An argument is invalid, or (convention ``"run"``) a
                config sets a parameter the model does not take or leaves out
                one it needs: checked before the first replication runs, with
                the closest parameter name for a typo.
            BackendUnavailable: The backend cannot run here; the message says why.
            SpoolError: ``spool_dir`` holds another study, or is damaged.
            ReplicationFailed: The model raised (chained as ``__cause__``) or
                broke the KPI contract for one replication. Finished results
                stay in ``spool_dir``.
            WorkerLost: A replication's worker died more than *retries* times.
            PoolClosed: *pool* was closed.
            PoolBusy: Another run holds *pool* (a ``ShardedSim`` not yet
                closed, a run on another thread).
        """
        replications = _check_replications(replications)
        if not isinstance(resume, bool):
            raise ConfigError(f"resume must be a bool, got {resume!r}")
        if resume and self._spool_dir is None:
            raise ConfigError(
                "resume=True needs a study directory: build the Experiment with spool_dir=..."
            )
        if progress is not None and not isinstance(progress, bool):
            raise ConfigError(f"progress must be a bool or None, got {progress!r}")
        if self._convention == "run":
            _check_parameters(self._model, self._configs)
        self._check_scenarios()
        if pool is not None:
            executor = self._pool_executor(pool, backend, max_workers, scheduler_address, retries)
            name = "processes"
            reason = f"pool: a WorkerPool of {executor.workers} ({pool.start_method})"
        else:
            executor, name, reason = self._executor(
                backend, max_workers, scheduler_address, retries
            )
        try:
            _check_main_model(self._model, name)
        except BaseException:
            if not isinstance(backend, Executor):
                executor.close()
            raise
        _warn_without_polars()
        try:
            spool = (
                None if self._spool_dir is None else _Spool(self._spool_dir, self.identity, resume)
            )
            try:
                return self._run(
                    replications=replications,
                    executor=executor,
                    name=name,
                    reason=reason,
                    spool=spool,
                    progress=progress,
                )
            finally:
                if spool is not None:
                    spool.close()
        finally:
            if not isinstance(backend, Executor):
                executor.close()  # the executor of pool= leaves the pool running

    @staticmethod
    def _pool_executor(
        pool: object, backend: object, max_workers: object, address: object, retries: int
    ) -> Executor:
        """The executor of ``run(pool=...)``: processes on that pool.

        Raises:
            ConfigError: *pool* is not a WorkerPool, or comes with a backend
                other than processes, with max_workers or a scheduler address.
        """
        if not isinstance(pool, WorkerPool):
            raise ConfigError(f"pool must be a WorkerPool, got {type(pool).__name__} {pool!r}")
        if pool.closed:
            raise PoolClosed("pool: this WorkerPool is closed; make a new one")
        if backend not in ("auto", "processes", "process"):
            raise ConfigError(
                f"pool= runs the replications on that WorkerPool's processes; it does not go "
                f"with backend={backend!r} (leave backend out, or use 'processes')"
            )
        if max_workers is not None or address is not None:
            raise ConfigError(
                f"max_workers and scheduler_address do not go with pool=: the WorkerPool has "
                f"its {plural(pool.workers, 'worker')}"
            )
        return ProcessExecutor(pool=pool, retries=retries)

    def _executor(
        self, backend: str | Executor, max_workers: int | None, address: str | None, retries: int
    ) -> tuple[Executor, str, str]:
        """Return (the executor, its name, why it was chosen)."""
        if isinstance(backend, Executor):
            if max_workers is not None or address is not None:
                raise ConfigError(
                    "max_workers and scheduler_address apply to a backend given by name; "
                    f"this backend is the executor {backend!r}, already configured"
                )
            return backend, backend.name, "requested"
        if not isinstance(backend, str):
            raise ConfigError(
                f"backend must be a backend name or an Executor, got "
                f"{type(backend).__name__} {backend!r}"
            )
        reason = "requested"
        name = EXECUTOR_ALIASES.get(backend, backend)  # checked by _LazyExecutor
        if backend == "auto":
            name, reason = auto_backend()
        if address is not None and name != "dask":
            raise ConfigError(
                f"scheduler_address applies to backend 'dask' only, got backend {backend!r}"
            )
        options: dict[str, Any] = {"max_workers": max_workers, "retries": retries}
        if address is not None:
            options["address"] = address
        if name == "processes":  # the forkserver imports what runs a unit, once for all workers
            options["preload"] = (_UNITS_MODULE,)
        # Validate the name and options now, but start workers only if there is work.
        return _LazyExecutor(name, options), name, reason

    def _run(
        self,
        *,
        replications: int,
        executor: Executor,
        name: str,
        reason: str,
        spool: _Spool | None,
        progress: bool | None,
    ) -> ExperimentResults:
        keys = [(c, r) for c in range(len(self._configs)) for r in range(replications)]
        results: dict[Key, Mapping[str, KPIValue]] = {}
        if spool is not None:
            results.update((key, kpis) for key, kpis in spool.done.items() if key[1] < replications)
        resumed = len(results)
        todo = [key for key in keys if key not in results]
        if todo:
            if isinstance(executor, _LazyExecutor):
                executor.start()
            workers = executor.workers
            line = (
                f"experiment {self._model}: {len(todo)} of {plural(len(keys), 'replication')} "
                f"on {name} ({plural(workers, 'worker')}; {reason})"
            )
            if resumed:
                line += f"; {resumed} read back from {self._spool_dir}"
            _log.info("%s", line)
            show = sys.stderr.isatty() if progress is None else progress
            bar = ProgressBar(show and len(keys) > 0, len(keys), f"{name} x{workers}", eta=True,
                              completed=resumed)
            bar.start()
            units = [self._unit(c, r) for c, r in todo]
            outcomes = executor.map_units(run_unit, units)
            try:
                for index, outcome in outcomes:
                    key = todo[index]
                    if isinstance(outcome, Done):
                        try:
                            kpis = _checked_kpis(outcome.value, self._model, key)
                            self._check_columns(kpis, key)
                        except ReplicationFailed as exc:
                            raise _replication_failed(
                                f"{exc}; {self._kept(len(results))}", key
                            ) from None
                        results[key] = kpis
                        if spool is not None:
                            spool.append(key, kpis)
                        bar.advance()
                    elif isinstance(outcome, Raised):
                        if isinstance(outcome.error, BackendUnavailable):
                            # Not the model's bug: this backend cannot run it (an extension
                            # that refuses sub-interpreters). One line, and what would work.
                            why = str(outcome.error).partition(": ")[2] or str(outcome.error)
                            raise BackendUnavailable(
                                f"backend {name!r} cannot run model {self._model}: {why}"
                            ) from None
                        raise self._failed(key, outcome, len(results)) from outcome.error
                    else:
                        raise self._lost(key, outcome, len(results), name)
            finally:
                close = getattr(outcomes, "close", None)
                if close is not None:
                    close()
                bar.stop()
        return ExperimentResults(
            model=self._model,
            configs=self._configs,
            replications=replications,
            master_seed=self._master_seed,
            backend=name,
            backend_reason=reason,
            results=results,
            resumed=resumed,
        )

    def _check_scenarios(self) -> None:
        """Check the scenarios against the model's knobs, before any replication runs.

        The knobs are the ``KNOBS`` (a :class:`~simulacra.scenarios.Knobs`) of the
        model function's module, as the examples declare them; a model without
        one checks its scenarios itself, when each run applies them.

        Raises:
            ScenarioError: A scenario does not fit the knobs.
        """
        if not self._scenarios:
            return
        declared = getattr(model_of(self._model), "__globals__", {}).get("KNOBS")
        from simulacra.scenarios import Knobs  # noqa: PLC0415  (no pydantic in it)

        if isinstance(declared, Knobs):
            for scenario in self._scenarios:
                scenario.check(declared, dynamic=True)  # each run draws and triggers

    def _check_columns(self, kpis: Mapping[str, KPIValue], key: Key) -> None:
        """A KPI with the name of a config field: refused at its first result, not at the end."""
        fields = _flatten(self._configs[key[0]])
        clash = sorted(set(fields) & set(kpis))
        if clash:
            raise _replication_failed(
                f"model {self._model} (config {key[0]}, replication {key[1]}) returned KPI "
                f"{clash[0]!r}, which is also the name of a config field, so the results "
                "table cannot hold both: rename the KPI or the parameter",
                key,
            )

    def _kept(self, finished: int) -> str:
        done = f"{plural(finished, 'finished replication')} {'is' if finished == 1 else 'are'}"
        if self._spool_dir is None:
            return f"{done} lost with it (no spool_dir)"
        return (
            f"{done} kept in {str(self._spool_dir)!r}; "
            "once the cause is fixed, run again with resume=True (simulacra experiment "
            "--resume) to finish the study, or in another spool_dir if the model changed"
        )

    def _failed(self, key: Key, outcome: Raised, finished: int) -> ReplicationFailed:
        error = outcome.error
        if error.__traceback__ is None and outcome.traceback:
            error.add_note(f"Traceback in the worker:\n{outcome.traceback.rstrip()}")
        config = _canonical_json(_flatten(self._configs[key[0]]))
        return _replication_failed(
            f"model {self._model} raised for config {key[0]} {config}, replication {key[1]}: "
            f"{type(error).__name__}: {error}. It is not retried (an exception is a bug, not "
            f"a crash); {self._kept(finished)}",
            key,
        )

    def _lost(self, key: Key, outcome: Lost, finished: int, name: str) -> WorkerLost:
        hint = ""
        if finished == 0 and name == "processes":
            hint = (
                ". If no replication can finish, the workers may die as they start: a script "
                "that runs a study must guard it with `if __name__ == '__main__':`, because "
                "spawned workers import the main module again"
            )
        exc = WorkerLost(
            f"the {name} worker running config {key[0]}, replication {key[1]} died "
            f"{plural(outcome.crashes, 'time')} ({outcome.reason}), more than retries allows; "
            f"{self._kept(finished)}{hint}"
        )
        exc.unit, exc.crashes = key, outcome.crashes
        return exc

    def __repr__(self) -> str:
        return (
            f"Experiment({self._model!r}, {len(self._configs)} configs, "
            f"master_seed={self._master_seed!r}, convention={self._convention!r})"
        )


@final
class _LazyExecutor:
    """A backend checked now and started only when there is work for it."""

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self._options = options
        self._executor: Executor | None = None
        _check_backend_name(name)

    def start(self) -> None:
        self._executor = get_executor(self.name, **self._options)

    def _started(self) -> Executor:
        if self._executor is None:
            raise KernelBug(f"backend {self.name!r} was used before it was started")
        return self._executor

    @property
    def workers(self) -> int:
        return self._started().workers

    def map_units(self, fn: Callable[[Any], Any], units: Sequence[Any], /) -> Iterator[Any]:
        return self._started().map_units(fn, units)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()


def _check_backend_name(name: str) -> None:
    # A backend this Python cannot run is refused here, before the spool is written.
    executor_name(name, auto=False, runnable=True)
