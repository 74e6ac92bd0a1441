"""Experiment: building a study, what the model gets, failures, the spool, tables and summaries.

Fast tests on the sequential and threads backends; the cross-backend and
crash tests live in ``test_experiment_determinism.py``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _experiment_models as models  # noqa: E402

from simulacra import (  # noqa: E402
    BackendUnavailable,
    ConfigError,
    DeterminismError,
    Experiment,
    ReplicationFailed,
    SeedTree,
    SpoolError,
    config_grid,
    derive_seed,
)
from simulacra.parallel import mean_interval, t_quantile  # noqa: E402

pl = pytest.importorskip("polars")


def draws_study(**kwargs: Any) -> Experiment:
    configs = kwargs.pop("configs", [{"label": "a"}, {"label": "b"}])
    return Experiment(models.draws, configs, master_seed=kwargs.pop("master_seed", 11), **kwargs)


# -- building a study ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda stream, config: {}, "a lambda has no importable name"),
        (models.Holder().method, "a bound method carries a live object"),
    ],
)
def test_unimportable_model_functions_are_refused_at_build_time(fn: Any, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        Experiment(fn, master_seed=1)

    message = str(info.value)
    assert message.startswith(
        "model_fn must be a module-level function importable as module:qualname, got "
    )
    assert why in message


def test_a_closure_is_refused_naming_what_was_given() -> None:
    def model(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
        return {}

    with pytest.raises(
        ConfigError,
        match=r"got function .*test_a_closure.*<locals>\.model: a "
        "function defined inside another function",
    ):
        Experiment(model, master_seed=1)


def test_model_references_and_classmethods_are_accepted() -> None:
    assert Experiment(models.draws, master_seed=1).model == "_experiment_models:draws"
    assert Experiment("_experiment_models:draws", master_seed=1).model == (
        "_experiment_models:draws"
    )
    assert Experiment(models.Holder.factory, master_seed=1).model == (
        "_experiment_models:Holder.factory"
    )
    bank = Experiment.from_run(f"{models.BANK}:run", master_seed=1)
    assert bank.model == f"{models.BANK}:run"
    assert bank.convention == "run"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"configs": {"a": 1}}, "configs must be a sequence of mappings"),
        ({"configs": []}, "configs must hold at least one config"),
        ({"configs": [1]}, r"configs\[0\] must be a mapping"),
        ({"configs": [{"x": object()}]}, r"configs\[0\]\['x'\] must be plain data"),
        ({"configs": [{"a": {1: 2}}]}, r"configs\[0\]\['a'\] keys must be str"),
        ({"configs": [{"replication": 1}]}, "the results table keeps for itself"),
        ({"master_seed": 1.5}, "master_seed must be an int, str or bytes"),
        ({"master_seed": True}, "master_seed must be an int, str or bytes"),
        ({"convention": "kwargs"}, "convention must be 'stream'"),
        ({"spool_dir": 3}, "spool_dir must be a path or None"),
        ({"common_random_numbers": 1}, "common_random_numbers must be a bool"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        draws_study(**kwargs)


def test_run_convention_needs_identifier_keys_other_than_seed() -> None:
    with pytest.raises(
        ConfigError,
        match=r"configs\[0\] key 'seed' must be a Python identifier "
        "other than 'seed'",
    ):
        Experiment.from_run(models.run_style, [{"seed": 3}], master_seed=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replications": 0}, "replications must be an int >= 1"),
        ({"replications": 2, "backend": "gpu"}, "backend must be one of 'auto', 'sequential'"),
        ({"replications": 2, "backend": 3}, "backend must be a backend name or an Executor"),
        ({"replications": 2, "resume": True}, "resume=True needs a study directory"),
        (
            {"replications": 2, "backend": "threads", "scheduler_address": "tcp://x:1"},
            "scheduler_address applies to backend 'dask' only",
        ),
        ({"replications": 2, "progress": "yes"}, "progress must be a bool or None"),
    ],
)
def test_bad_run_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        draws_study().run(**kwargs)


def test_config_grid_is_the_product_first_key_slowest() -> None:
    assert config_grid(a=[1, 2], b=["x", "y"]) == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
    ]
    assert config_grid({"a.b": [1]}, c=[True]) == [{"a.b": 1, "c": True}]
    with pytest.raises(ConfigError, match="parameter 'a' must have at least one value"):
        config_grid(a=[])
    with pytest.raises(ConfigError, match="parameter 'a' must be a list of values"):
        config_grid(a="xy")
    with pytest.raises(ConfigError, match="parameter 'a' is given twice"):
        config_grid({"a": [1]}, a=[2])


# -- what the model gets -------------------------------------------------------------


def test_each_replication_gets_its_own_stream_node() -> None:
    study = draws_study(master_seed="s")
    results = study.run(3, "sequential")

    for record in results:
        node = SeedTree("s").config(record.config_index).replication(record.replication)
        assert study.stream(*record.key) == node
        assert record.kpis["a"] == node.stream("x").random()
    assert results.keys() == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_run_convention_passes_the_node_seed_and_the_config_as_keywords() -> None:
    study = Experiment.from_run(models.run_style, [{"servers": 3, "customers": 50}], master_seed=9)
    results = study.run(2, "sequential")

    for record in results:
        seed = derive_seed(9, "config", 0, "replication", record.replication)
        assert dict(record.kpis) == models.run_style(seed, servers=3, customers=50)


def test_common_random_numbers_share_streams_across_configs() -> None:
    common = draws_study(common_random_numbers=True).run(2, "sequential")
    independent = draws_study().run(2, "sequential")

    assert (
        common[0, 1]["a"] == common[1, 1]["a"] == SeedTree(11).replication(1).stream("x").random()
    )
    assert independent[0, 1]["a"] != independent[1, 1]["a"]


def test_a_model_that_mutates_its_config_cannot_leak_it() -> None:
    study = Experiment(models.mutates_config, [{"nested": {"n": 0}}], master_seed=1)
    results = study.run(3, "threads", 2)

    assert [dict(r.kpis) for r in results] == [{"seen": 1, "n": 1}] * 3
    assert study.configs == ({"nested": {"n": 0}},)


def test_numpy_scalars_become_plain_kpis() -> None:
    pytest.importorskip("numpy")
    results = Experiment(models.numpy_kpis, master_seed=1).run(1, "sequential")

    kpis = results[0, 0]
    assert [type(v) for v in kpis.values()] == [float, int, bool]


def test_run_one_gives_what_run_gives() -> None:
    study = draws_study()

    assert study.run_one(1, 4) == dict(study.run(5, "sequential")[1, 4])
    with pytest.raises(ConfigError, match=r"config_index must be an int in \[0, 2\)"):
        study.run_one(2, 0)


# -- failures ------------------------------------------------------------------------


def test_a_model_exception_names_the_replication_and_keeps_finished_results(
    tmp_path: Path,
) -> None:
    configs = [{"index": 0}, {"index": 1}]
    study = Experiment(models.buggy, configs, master_seed=3, spool_dir=tmp_path)

    with pytest.raises(ReplicationFailed) as info:
        study.run(4, "sequential")

    exc = info.value
    assert (exc.config_index, exc.replication) == (1, 2)
    assert isinstance(exc.__cause__, ZeroDivisionError)
    message = str(exc)
    assert "raised for config 1" in message
    assert "replication 2: ZeroDivisionError" in message
    assert "It is not retried" in message
    assert "6 finished replications are kept in" in message
    assert len((tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 6


def test_a_model_exception_on_threads_is_not_retried_either() -> None:
    study = Experiment(models.buggy, [{"index": 0}, {"index": 1}], master_seed=3)

    with pytest.raises(ReplicationFailed, match="no spool_dir") as info:
        study.run(4, "threads", 2)

    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (models.not_a_mapping, "returned list, expected a mapping of KPI names"),
        (models.bad_kpi, r"returned KPI 'hist' = \[1, 2\] \(list\), expected an int"),
    ],
)
def test_the_kpi_contract_is_checked(model: Any, message: str) -> None:
    with pytest.raises(ReplicationFailed, match=message) as info:
        Experiment(model, master_seed=1).run(1, "sequential")

    assert (info.value.config_index, info.value.replication) == (0, 0)


@pytest.mark.parametrize("backend", ["sequential", "processes"])
def test_a_run_result_returned_as_kpis_is_named_not_a_pickling_error(backend: str) -> None:
    study = Experiment.from_run(models.returns_run_result, [{"agents": 2}], master_seed=1)

    with pytest.raises(ReplicationFailed) as info:
        study.run(1, backend, 1)

    message = str(info.value)
    assert "returned RunResult, expected a mapping of KPI names" in message
    assert "expected a mapping of KPI names" in message
    assert "return a dict of KPIs" in message
    assert "pickle" not in message


def test_config_keys_are_checked_against_the_models_signature_before_any_run(
    tmp_path: Path,
) -> None:
    spool = tmp_path / "study"
    typo = Experiment.from_run(
        models.needs_rate,
        [{"servers": 2, "rate": 1.0}, {"servers": 2, "rat": 1.0}],
        master_seed=1,
        spool_dir=spool,
    )
    with pytest.raises(
        ConfigError,
        match=r"config 1 sets 'rat', which model .*needs_rate does "
        r"not take \(its parameters: servers, rate, customers\); did you mean "
        r"'rate'\?",
    ):
        typo.run(1, "sequential")
    assert not (spool / "results.jsonl").exists()  # nothing ran

    missing = Experiment.from_run(models.needs_rate, [{"servers": 2}], master_seed=1)
    with pytest.raises(ConfigError, match=r"config 0 does not set 'rate', which model"):
        missing.run(1, "sequential")
    with pytest.raises(ConfigError, match=r"config 0 does not set 'rate'"):
        missing.run_one(0, 0)


def test_a_model_taking_kwargs_accepts_any_config_key() -> None:
    study = Experiment.from_run(models.takes_anything, [{"whatever": 1, "else": 2}], master_seed=1)

    assert [dict(r.kpis) for r in study.run(1, "sequential")] == [{"n": 2}]


# -- the spool -------------------------------------------------------------------------


def test_the_spool_records_the_study_and_every_result(tmp_path: Path) -> None:
    study = draws_study(spool_dir=tmp_path / "study")
    results = study.run(2, "sequential")

    identity = json.loads((tmp_path / "study" / "study.json").read_text(encoding="utf-8"))
    assert identity["model"] == "_experiment_models:draws"
    assert identity["master_seed"] == 11
    assert identity["configs"] == [{"label": "a"}, {"label": "b"}]
    assert len(identity["configs_digest"]) == 64
    lines = [
        json.loads(line)
        for line in (tmp_path / "study" / "results.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [(r["config_index"], r["replication"]) for r in lines] == results.keys()
    assert [r["kpis"] for r in lines] == [dict(r.kpis) for r in results]


def test_resume_skips_what_is_done_and_extends_a_study(tmp_path: Path) -> None:
    study = draws_study(spool_dir=tmp_path)
    first = study.run(2, "sequential")

    with pytest.raises(ConfigError, match=r"resume is False, but spool_dir .* already holds 4"):
        study.run(2, "sequential")
    again = study.run(2, "sequential", resume=True)
    more = study.run(3, "sequential", resume=True)

    assert again.resumed == 4
    assert [r.kpis for r in again] == [r.kpis for r in first]
    assert more.resumed == 4
    assert len(more) == 6
    assert [r.kpis for r in more] == [r.kpis for r in draws_study().run(3, "sequential")]


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"master_seed": 12}, "its master_seed is 11, this study's is 12"),
        ({"configs": [{"label": "a"}]}, "its configs is digest"),
        ({"common_random_numbers": True}, "its common_random_numbers is False"),
    ],
)
def test_a_different_study_is_refused(tmp_path: Path, change: dict[str, Any], what: str) -> None:
    draws_study(spool_dir=tmp_path).run(1, "sequential")

    with pytest.raises(SpoolError, match="holds a different study: " + what):
        draws_study(spool_dir=tmp_path, **change).run(1, "sequential", resume=True)


def test_a_different_model_is_refused(tmp_path: Path) -> None:
    draws_study(spool_dir=tmp_path).run(1, "sequential")

    with pytest.raises(SpoolError, match="its model is '_experiment_models:draws'"):
        Experiment(
            models.queue, [{"label": "a"}, {"label": "b"}], master_seed=11, spool_dir=tmp_path
        ).run(1, "sequential", resume=True)


def test_a_damaged_spool_is_refused(tmp_path: Path) -> None:
    draws_study(spool_dir=tmp_path).run(1, "sequential")
    with (tmp_path / "results.jsonl").open("a", encoding="utf-8") as f:
        f.write("not json\n")

    with pytest.raises(SpoolError, match="line 3 is not a result record"):
        draws_study(spool_dir=tmp_path).run(1, "sequential", resume=True)


def test_results_without_a_study_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("", encoding="utf-8")

    with pytest.raises(SpoolError, match=r"holds results\.jsonl but no study\.json"):
        draws_study(spool_dir=tmp_path).run(1, "sequential")


def test_two_different_results_for_one_key_are_a_determinism_error(tmp_path: Path) -> None:
    draws_study(spool_dir=tmp_path).run(1, "sequential")
    lines = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["kpis"]["a"] = 0.5
    with (tmp_path / "results.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")

    with pytest.raises(DeterminismError, match="two different results for config 0"):
        draws_study(spool_dir=tmp_path).run(1, "sequential", resume=True)


def test_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    draws_study(spool_dir=tmp_path).run(2, "sequential")
    path = tmp_path / "results.jsonl"
    path.write_bytes(path.read_bytes()[:-10])

    resumed = draws_study(spool_dir=tmp_path).run(2, "sequential", resume=True)

    assert resumed.resumed == 3
    assert path.read_text(encoding="utf-8").count("\n") == 4


# -- tables and summaries ------------------------------------------------------------


def test_the_table_has_keys_config_fields_and_kpis() -> None:
    configs = [
        {"n": 1, "opts": {"mode": "x", "w": [1, 2]}, "rate": 1},
        {"n": 2, "opts": {"mode": "y", "w": []}, "rate": 1.5},
    ]
    results = Experiment(models.draws, configs, master_seed=2).run(2, "sequential")
    table = results.table()

    assert table.columns == [
        "config_index",
        "replication",
        "n",
        "opts.mode",
        "opts.w",
        "rate",
        "a",
        "b",
        "c",
        "tag",
        "ok",
    ]
    assert table.dtypes == [
        pl.Int64,
        pl.Int64,
        pl.Int64,
        pl.String,
        pl.String,
        pl.Float64,
        pl.Float64,
        pl.Float64,
        pl.Int64,
        pl.String,
        pl.Boolean,
    ]
    assert table["opts.w"].to_list() == ["[1,2]", "[1,2]", "[]", "[]"]
    assert table["rate"].to_list() == [1.0, 1.0, 1.5, 1.5]
    assert table["a"].to_list() == [r.kpis["a"] for r in results]


def test_csv_and_parquet_hold_the_table(tmp_path: Path) -> None:
    results = draws_study().run(3, "sequential")
    results.to_csv(tmp_path / "r.csv")
    results.to_parquet(tmp_path / "r.parquet")

    assert pl.read_parquet(tmp_path / "r.parquet").equals(results.table())
    from_csv = pl.read_csv(tmp_path / "r.csv")
    assert from_csv["a"].to_list() == results.table()["a"].to_list()  # exact float text


def test_the_summary_is_a_student_t_interval_per_config_and_kpi() -> None:
    results = draws_study().run(5, "sequential")
    summary = results.summary(0.9)

    assert summary.columns == [
        "config_index",
        "label",
        "kpi",
        "n",
        "mean",
        "std",
        "halfwidth",
        "ci_low",
        "ci_high",
    ]
    assert summary["kpi"].to_list() == ["a", "b", "c"] * 2  # str and bool KPIs left out
    row = summary.row(4, named=True)
    values = [float(r.kpis["b"]) for r in results if r.config_index == 1]
    mean = math.fsum(values) / 5
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / 4)
    assert (row["config_index"], row["label"], row["n"]) == (1, "b", 5)
    assert row["mean"] == pytest.approx(mean, rel=1e-15)
    assert row["halfwidth"] == pytest.approx(t_quantile(0.95, 4) * std / math.sqrt(5), rel=1e-12)
    assert row["ci_low"] == pytest.approx(mean - row["halfwidth"], rel=1e-15)
    with pytest.raises(ConfigError, match="confidence must be a number strictly between 0 and 1"):
        results.summary(95)


def test_one_replication_has_no_interval() -> None:
    interval = mean_interval([2.0])

    assert interval.mean == 2.0
    assert interval.n == 1
    assert math.isnan(interval.halfwidth)
    assert math.isnan(interval.std)


def test_a_kpi_named_like_a_config_field_is_reported_by_the_run() -> None:
    # The results table could not hold both, so the study stops at the first such
    # result instead of running every replication and failing when it writes them.
    with pytest.raises(ReplicationFailed, match="returned KPI 'a', which is also the name"):
        Experiment(models.draws, [{"a": 1}], master_seed=1).run(1, "sequential")


def test_results_index_and_repr() -> None:
    results = draws_study().run(2, "sequential")

    assert len(results) == 4
    assert results.replications == 2
    assert results.master_seed == 11
    assert results[1, 0] == results.records[2].kpis
    assert results.kpi_names == ("a", "b", "c", "tag", "ok")
    with pytest.raises(KeyError):
        results[2, 0]
    assert repr(results) == (
        "<ExperimentResults _experiment_models:draws: 2 configs x 2 replications on sequential>"
    )


def test_progress_bar_shows_backend_and_count(capsys: pytest.CaptureFixture[str]) -> None:
    draws_study().run(3, "sequential", progress=True)

    err = capsys.readouterr().err
    assert "sequential x1" in err
    assert "6/6" in err


def test_no_progress_bar_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    draws_study().run(3, "sequential")

    assert capsys.readouterr().err == ""


@pytest.mark.without_subinterpreters
def test_interpreters_backend_says_why_it_is_unavailable(tmp_path: Path) -> None:
    study = draws_study(spool_dir=tmp_path)

    with pytest.raises(
        BackendUnavailable, match=r"needs sub-interpreters: Python 3\.14.s concurrent\.futures"
    ):
        study.run(1, "interpreters")
    # Refused before the spool is opened: nothing is written (issue 29).
    assert not (tmp_path / "study.json").exists()
    assert not (tmp_path / "results.jsonl").exists()


def test_a_kpi_named_like_a_config_field_fails_at_its_first_result(tmp_path: Path) -> None:
    model = tmp_path / "clash.py"
    model.write_text("def run(seed=0, doctors=1):\n    return {'doctors': doctors, 'x': 1.0}\n",
                     encoding="utf-8")
    study = Experiment.from_run(f"{model}:run", [{"doctors": 2}], master_seed=1,
                                spool_dir=tmp_path / "study")

    with pytest.raises(ReplicationFailed, match=r"returned KPI 'doctors', which is also the name "
                                                r"of a config field.* rename the KPI"):
        study.run(3, "sequential")
    assert (tmp_path / "study" / "results.jsonl").read_text(encoding="utf-8") == ""


def test_resuming_refuses_the_results_of_an_edited_model(tmp_path: Path) -> None:
    model = tmp_path / "clinic.py"
    model.write_text("def run(seed=0, doctors=1):\n    return {'seen': seed % 7 + doctors}\n",
                     encoding="utf-8")
    spool = tmp_path / "study"
    study = Experiment.from_run(f"{model}:run", [{"doctors": 2}], master_seed=1,
                                spool_dir=spool)
    study.run(4, "sequential")
    lines = (spool / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (spool / "results.jsonl").write_text("".join(lines[:2]), encoding="utf-8")  # interrupted

    model.write_text("def run(seed=0, doctors=1):\n    return {'seen': seed % 5 + doctors}\n",
                     encoding="utf-8")
    edited = Experiment.from_run(f"{model}:run", [{"doctors": 2}], master_seed=1,
                                 spool_dir=spool)
    with pytest.raises(SpoolError, match=r"results of another version of the model: the source "
                                         r"file of .*clinic\.py:run changed"):
        edited.run(4, "sequential", resume=True)


def test_the_advice_for_the_results_of_an_edited_model_works(tmp_path: Path) -> None:
    """It said "or without resume": without resume the directory is refused just the same."""
    model = tmp_path / "clinic.py"
    model.write_text("def run(seed=0, doctors=1):\n    return {'seen': seed % 7 + doctors}\n",
                     encoding="utf-8")
    spool = tmp_path / "study"
    Experiment.from_run(f"{model}:run", [{"doctors": 2}], master_seed=1,
                        spool_dir=spool).run(2, "sequential")
    model.write_text("def run(seed=0, doctors=1):\n    return {'seen': seed % 5 + doctors}\n",
                     encoding="utf-8")

    def edited(where: Path) -> Experiment:
        return Experiment.from_run(f"{model}:run", [{"doctors": 2}], master_seed=1,
                                   spool_dir=where)

    advice = ("; run the study again in another spool_dir, or empty this one to run it there "
              "afresh")
    for resume in (True, False):
        with pytest.raises(SpoolError) as info:
            edited(spool).run(2, "sequential", resume=resume)
        assert str(info.value).endswith(advice)
        assert "without resume" not in str(info.value)
    # What it says works: another spool_dir, or this one emptied.
    assert edited(tmp_path / "another").run(2, "sequential").replications == 2
    for path in spool.iterdir():
        path.unlink()
    assert edited(spool).run(2, "sequential").replications == 2


def test_a_count_of_one_finished_replication_agrees_in_number(tmp_path: Path) -> None:
    model = tmp_path / "one.py"
    model.write_text("def run(seed=0):\n    return {'x': 1}\n", encoding="utf-8")
    Experiment.from_run(f"{model}:run", [{}], master_seed=1, spool_dir=tmp_path).run(
        1, "sequential")
    with pytest.raises(ConfigError, match=r"already holds 1 finished replication of this "
                                          r"study; pass resume=True"):
        Experiment.from_run(f"{model}:run", [{}], master_seed=1, spool_dir=tmp_path).run(
            1, "sequential")
