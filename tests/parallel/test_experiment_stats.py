"""The Student-t quantile and the mean's confidence interval, without scipy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulacra import ConfigError
from simulacra.parallel import mean_interval, t_quantile

#: t_{0.975, df} from published tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    50: 2.009,
    100: 1.984,
}
#: t_{0.995, df}, same source.
T_995 = {1: 63.657, 5: 4.032, 10: 3.169, 30: 2.750, 100: 2.626}


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_known_answers_at_97_5_percent(df: int, expected: float) -> None:
    assert round(t_quantile(0.975, df), 3) == expected


@pytest.mark.parametrize(("df", "expected"), sorted(T_995.items()))
def test_known_answers_at_99_5_percent(df: int, expected: float) -> None:
    assert round(t_quantile(0.995, df), 3) == expected


def test_infinite_df_is_the_normal_quantile() -> None:
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959963984540054, rel=1e-15)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959963984540054, rel=1e-5)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.999])
def test_closed_forms_agree_with_the_general_inversion(p: float) -> None:
    # df 1 and 2 have closed forms; df just above them goes through the incomplete beta.
    assert t_quantile(p, 1.0 + 1e-9) == pytest.approx(t_quantile(p, 1), rel=1e-6)
    assert t_quantile(p, 2.0 + 1e-9) == pytest.approx(t_quantile(p, 2), rel=1e-6)


def test_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4.5, 7, 19, 30, 120, 1000):
        for p in (0.5001, 0.6, 0.74, 0.76, 0.9, 0.95, 0.975, 0.995, 0.99999):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-10), (p, df)


@given(st.floats(0.001, 0.999), st.floats(0.5, 500))
def test_symmetric_and_increasing(p: float, df: float) -> None:
    q = t_quantile(p, df)
    assert t_quantile(1 - p, df) == pytest.approx(-q, rel=1e-9, abs=1e-12)
    if p < 0.998:
        assert t_quantile(p + 0.001, df) > q


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.5, 0), (0.9, -1), (True, 3)])
def test_bad_arguments(p: float, df: float) -> None:
    with pytest.raises(ConfigError):
        t_quantile(p, df)


def test_mean_interval_of_a_known_sample() -> None:
    interval = mean_interval([1.0, 2.0, 3.0, 4.0])

    assert interval.mean == 2.5
    assert interval.std == pytest.approx(math.sqrt(5 / 3), rel=1e-15)
    assert interval.halfwidth == pytest.approx(3.182446305284263 * math.sqrt(5 / 3) / 2, rel=1e-9)
    assert (interval.low, interval.high) == (2.5 - interval.halfwidth, 2.5 + interval.halfwidth)
    with pytest.raises(ConfigError, match="at least one"):
        mean_interval([])
