"""Settings files switch the backend with no change to model code; bad settings are named."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    ConfigError,
    ExecutionBackend,
    LocalBackend,
    Model,
    ProcessPoolBackend,
    ThreadPoolBackend,
    get_backend,
    load_settings,
)
from simulacra.backends import backend_names, parse_settings, register_backend, unregister_backend

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _engine_models as models  # noqa: E402


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _json(tmp_path: Path, document: Any) -> Path:
    return _write(tmp_path, "settings.json", json.dumps(document))


def _ring(**kwargs: Any) -> Model:
    """The model code: identical whatever the settings say."""
    model = Model(seed=11, **kwargs)
    model.add_many(models.Ring, range(8), size=8)
    return model


@pytest.mark.parametrize(("document", "expected"), [
    ({"orchestration": {"mode": "local"}}, "local"),
    ({"orchestration": {"mode": "threaded", "max_workers": 3}}, "threaded"),
    ({"orchestration": {"mode": "processes", "max_workers": 2, "partition": "hash"}},
     "processes"),
    ({}, "local"),
])
def test_a_settings_file_switches_the_backend(tmp_path: Path, document: dict[str, Any],
                                              expected: str) -> None:
    reference = _ring().run(models.Ring.act, steps=4)

    result = _ring(settings=_json(tmp_path, document)).run(models.Ring.act, steps=4)

    assert result.backend == expected
    assert result.digest == reference.digest


def test_settings_build_the_backend_with_its_options(tmp_path: Path) -> None:
    settings = load_settings(_json(tmp_path, {"orchestration": {"mode": "threaded",
                                                                "max_workers": 8}}))
    backend = settings.backend()

    assert isinstance(backend, ThreadPoolBackend)
    assert backend.max_workers == 8
    assert settings.mode == "threaded"
    assert dict(settings.options) == {"max_workers": 8}


def test_toml_settings(tmp_path: Path) -> None:
    path = _write(tmp_path, "settings.toml", '[orchestration]\nmode = "processes"\n'
                                             'max_workers = 3\nstart_method = "forkserver"\n')
    backend = load_settings(path).backend()

    assert isinstance(backend, ProcessPoolBackend)
    assert backend.max_workers == 3


def test_yaml_settings(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = _write(tmp_path, "settings.yaml", "orchestration:\n  mode: threaded\n  max_workers: 2\n")

    assert isinstance(load_settings(path).backend(), ThreadPoolBackend)


def test_a_settings_mapping_works_too() -> None:
    result = _ring(settings={"orchestration": {"mode": "threaded"}}).run(models.Ring.act)

    assert result.backend == "threaded"


@pytest.mark.parametrize(("document", "names"), [
    ({"orchestration": {"mode": "threaded", "max_wrokers": 8}},
     ["orchestration.max_wrokers", "is not a known setting"]),
    ({"orchestration": {"mode": "threaded", "max_workers": 0}},
     ["orchestration.max_workers", "greater than or equal to 1", "got 0"]),
    ({"orchestration": {"mode": "threaded", "max_workers": "8"}},
     ["orchestration.max_workers", "valid integer", "got '8'"]),
    ({"orchestration": {"mode": "threaded", "max_workers": True}},
     ["orchestration.max_workers", "got True"]),
    ({"orchestration": {"mode": "cluster"}},
     ["orchestration.mode", "'cluster'",
      "async, dask, emulator, local, mcp, pregel, processes, threaded"]),
    ({"orchestration": {"mode": "local", "max_workers": 2}},
     ["orchestration.max_workers is not an option of mode 'local'", "no options"]),
    ({"orchestration": {"mode": "processes", "start_method": "fork"}},
     ["start_method", "'fork'"]),
    ({"orchestration": {"mode": "processes", "partition": "random"}},
     ["partition", "'random'"]),
    ({"orchestration": 3}, ["orchestration must be a mapping"]),
    ({"orchestra": {}}, ["orchestra is not a known setting"]),
    ([1, 2], ["(top level) must be a mapping"]),
])
def test_bad_settings_name_the_field(tmp_path: Path, document: Any, names: list[str]) -> None:
    path = _json(tmp_path, document)

    with pytest.raises(ConfigError) as info:
        load_settings(path).backend()

    message = str(info.value)
    for name in names:
        assert name in message


def test_the_file_is_named_in_errors(tmp_path: Path) -> None:
    path = _json(tmp_path, {"orchestration": {"mode": "threaded", "max_workers": -1}})

    with pytest.raises(ConfigError, match=r"settings\.json: orchestration\.max_workers"):
        Model(seed=0, settings=path)


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("settings.json", "{not json", "not valid JSON"),
    ("settings.toml", "orchestration = [", "not valid TOML"),
    ("settings.ini", "[orchestration]", "must end in .json, .toml, .yaml or .yml"),
])
def test_unreadable_settings_files(tmp_path: Path, name: str, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_settings(_write(tmp_path, name, text))


def test_a_missing_settings_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="settings file not found"):
        Model(seed=0, settings=tmp_path / "nope.json")


def test_pregel_mode_runs_from_settings(tmp_path: Path) -> None:
    path = _json(tmp_path, {"orchestration": {"mode": "pregel", "max_supersteps": 5}})
    settings = load_settings(path)
    assert settings.mode == "pregel"

    reference = _ring().run(models.Ring.act, steps=4)
    result = _ring(settings=path).run(models.Ring.act, steps=4)
    assert (result.backend, result.digest) == ("pregel", reference.digest)


def test_backend_and_settings_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        Model(seed=0, backend="local", settings=_json(tmp_path, {}))


def test_get_backend_by_name() -> None:
    assert isinstance(get_backend("local"), LocalBackend)
    assert get_backend("threaded", max_workers=2).max_workers == 2  # type: ignore[attr-defined]
    assert isinstance(get_backend("processes", max_workers=1), ProcessPoolBackend)
    assert backend_names() == ("async", "dask", "emulator", "local", "mcp", "pregel", "processes",
                               "threaded")


def test_get_backend_errors_list_what_is_known() -> None:
    with pytest.raises(ConfigError) as info:
        get_backend("gpu")
    assert str(info.value) == (
        "unknown backend 'gpu' (known: async, dask, emulator, local, mcp, pregel, processes, "
        "threaded)"
    )
    with pytest.raises(ConfigError, match="backend 'local' has no option 'max_workers'"):
        get_backend("local", max_workers=2)
    with pytest.raises(ConfigError, match="max_workers must be an int >= 1 or None, got int 0"):
        get_backend("processes", max_workers=0)


def test_a_registered_backend_is_reachable_from_settings() -> None:
    def factory(**options: Any) -> ExecutionBackend:
        return LocalBackend()

    register_backend("quiet", factory, options=["volume"])
    try:
        settings = parse_settings({"orchestration": {"mode": "quiet"}})
        assert isinstance(settings.backend(), LocalBackend)
        with pytest.raises(ConfigError, match="already taken"):
            register_backend("quiet", factory)
        with pytest.raises(ConfigError, match="already taken"):
            register_backend("dask", factory)
    finally:
        unregister_backend("quiet")
    with pytest.raises(ConfigError, match="unknown backend 'quiet'"):
        get_backend("quiet")
