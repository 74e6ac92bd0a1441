"""Settings files: switch the backend with no change to model code.

``settings.json`` (or ``.toml``, or ``.yaml``/``.yml`` when PyYAML is
installed)::

    {"orchestration": {"mode": "processes", "max_workers": 8}}

is validated with pydantic (imported only when settings are read, so that
``import simulacra`` stays fast) and every problem is reported as a
:class:`~simulacra.ConfigError` that names the field.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, final

from simulacra._util import describe_error, os_problem, yaml_problem
from simulacra.errors import ConfigError

from ._base import ExecutionBackend
from ._registry import (
    RESERVED_BACKENDS,
    backend_names,
    backend_options,
    canonical_backend,
    canonical_options,
    get_backend,
)

__all__ = ["Settings", "load_settings", "parse_settings"]


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings: which backend runs the agents, and its options.

    Attributes:
        mode: The backend's registry name (``"local"``, ``"threaded"``,
            ``"processes"``...).
        options: The backend's keyword options that the file sets.
        source: Where the settings came from (a path), for messages.
    """

    mode: str = "local"
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None

    def backend(self) -> ExecutionBackend:
        """Build the backend these settings name.

        Raises:
            BackendUnavailable: The mode is reserved for a later version.
        """
        return get_backend(self.mode, **self.options)


@cache
def _schema() -> Any:
    """The pydantic model of a settings document (built on first use)."""
    from pydantic import BaseModel, ConfigDict, Field  # noqa: PLC0415  (lazy: heavy import)

    class Orchestration(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

        mode: str = "local"
        max_workers: int | None = Field(default=None, ge=1)
        start_method: str | None = None
        partition: str | None = None
        partition_strategy: str | None = None  # seed 001's name for partition
        async_semaphore_limit: int | None = Field(default=None, ge=1)
        max_supersteps: int | None = Field(default=None, ge=1)
        scheduler_address: str | None = None
        n_workers: int | None = Field(default=None, ge=1)
        mcp_config: dict[str, Any] | None = None

    class Document(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

        orchestration: Orchestration = Field(default_factory=Orchestration)

    return Document


def parse_settings(data: object, source: str = "<settings>") -> Settings:
    """Validate a settings document already read into Python data.

    Args:
        data: ``{"orchestration": {"mode": ..., option: value, ...}}``.
        source: Where it came from, for error messages.

    Raises:
        ConfigError: A key is unknown, a value has the wrong type or range, the
            mode is unknown, or an option does not belong to the mode; the
            message names each field (``orchestration.max_workers``).
    """
    from pydantic import ValidationError  # noqa: PLC0415  (lazy: heavy import)

    try:
        document = _schema().model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_error(e) for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None
    orchestration = document.orchestration
    mode: str = canonical_backend(orchestration.mode)
    if mode not in backend_names() and mode not in RESERVED_BACKENDS:
        reserved = (f" (reserved for later versions: {', '.join(sorted(RESERVED_BACKENDS))})"
                    if RESERVED_BACKENDS else "")
        raise ConfigError(
            f"{source}: orchestration.mode must be one of {', '.join(backend_names())}"
            f"{reserved}, got {mode!r}"
        )
    given = canonical_options(
        {key: value for key, value in orchestration.model_dump().items()
         if key != "mode" and value is not None}, f"{source}: orchestration.")
    accepted = backend_options(mode)
    for key in sorted(given):
        if key not in accepted:
            takes = ", ".join(sorted(accepted)) or "no options"
            raise ConfigError(
                f"{source}: orchestration.{key} is not an option of mode {mode!r} "
                f"(it takes: {takes})"
            )
    return Settings(mode, MappingProxyType(given), source)


def _read(path: Path) -> object:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            with path.open(encoding="utf-8") as file:
                return json.load(file)
        if suffix == ".toml":
            with path.open("rb") as file:
                return tomllib.load(file)
        if suffix in (".yaml", ".yml"):
            try:
                import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  (optional)
            except ImportError:
                raise ConfigError(
                    f"{path}: reading YAML settings needs PyYAML (pip install pyyaml); "
                    "or write settings.json or settings.toml"
                ) from None
            with path.open(encoding="utf-8") as file:
                return yaml.safe_load(file)
    except FileNotFoundError:
        raise ConfigError(f"settings file not found: {str(path)!r}") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {suffix[1:].upper()}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {str(path)!r}: {os_problem(exc)}") from None
    except Exception as exc:  # yaml.YAMLError and friends
        if type(exc).__module__.startswith("yaml"):
            raise ConfigError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
        raise
    raise ConfigError(
        f"settings file {str(path)!r} must end in .json, .toml, .yaml or .yml, "
        f"got {suffix or 'no suffix'!r}"
    )


def load_settings(path: str | os.PathLike[str]) -> Settings:
    """Read and validate a settings file (``.json``, ``.toml``, ``.yaml``/``.yml``).

    Example file: ``{"orchestration": {"mode": "threaded", "max_workers": 8}}``.
    Modes: ``"local"`` (no options), ``"threaded"`` (``max_workers``),
    ``"processes"`` (``max_workers``, ``start_method``, ``partition``); the
    reserved modes ``"async"``, ``"pregel"``, ``"dask"``, ``"mcp"`` and
    ``"emulator"`` validate but cannot run yet.

    Raises:
        ConfigError: The file is missing or unreadable, or a setting is bad;
            the message names the file and the field.
    """
    if not isinstance(path, str | os.PathLike):
        raise ConfigError(f"path must be a str or os.PathLike, got {type(path).__name__} {path!r}")
    resolved = Path(path)
    return parse_settings(_read(resolved), str(resolved))
