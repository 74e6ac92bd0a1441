r"""Summary statistics of replications: the mean and its Student-t confidence interval.

Standard library only (no scipy). The t quantile is computed, not looked up:
Student's t CDF is expressed through the regularised incomplete beta function,

    P(T <= t) = 1 - I_x(df/2, 1/2) / 2,   x = df / (df + t^2),   for t >= 0,

where ``I_x(a, b)`` is evaluated by its continued fraction (modified Lentz, as
in Numerical Recipes' ``betacf``), and the CDF is inverted by bisection until
the bracket stops shrinking. Near the centre (``p < 0.75``) the central form
``P(|T| <= t) = I_y(1/2, df/2)``, ``y = t^2 / (df + t^2)``, is solved instead,
so that ``1 - p`` never cancels. ``df = 1`` (Cauchy) and ``df = 2`` use their
closed forms, infinite ``df`` the normal quantile of
:class:`statistics.NormalDist`. Against scipy the relative error is below
1e-11 for ``df <= 1000`` and below 1e-8 up to ``df = 1e6`` (where ``lgamma``
of large arguments loses digits). Known-answer tests pin the result against
published tables (``t_{0.975}``: 12.706 at 1 df, 2.228 at 10, 2.042 at 30).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import final

from simulacra.errors import ConfigError

__all__ = ["MeanInterval", "check_confidence", "mean_interval", "t_quantile"]

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 1000


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``."""
    return 0.5 * _betainc(0.5 * df, 0.5, df / (df + t * t))


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _t_central(t: float, df: float) -> float:
    """``P(|T| <= t)`` for ``t >= 0``."""
    return _betainc(0.5, 0.5 * df, t * t / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """Return the *p*-quantile of Student's t distribution with *df* degrees of freedom.

    Args:
        p: A probability in (0, 1), e.g. 0.975 for a two-sided 95% interval.
        df: Degrees of freedom, > 0 (``math.inf`` gives the normal quantile).

    Returns:
        ``t`` such that ``P(T <= t) = p``.

    Raises:
        ConfigError: *p* is not in (0, 1) or *df* is not > 0.
    """
    if not _is_real(p) or not 0.0 < p < 1.0:
        raise ConfigError(f"p must be a probability strictly between 0 and 1, got {p!r}")
    if not _is_real(df) or not df > 0:
        raise ConfigError(f"df must be a number of degrees of freedom > 0, got {df!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2.0 * p - 1.0) / math.sqrt(2.0 * p * (1.0 - p))
    if p < 0.75:
        # Near the centre 1 - p cancels: solve P(|T| <= t) = 2p - 1 instead.
        target = 2.0 * p - 1.0

        def below(t: float) -> bool:
            return _t_central(t, df) < target
    else:
        tail = 1.0 - p

        def below(t: float) -> bool:
            return _t_upper_tail(t, df) > tail

    lo, hi = 0.0, max(1.0, 2.0 * NormalDist().inv_cdf(p))
    while below(hi):
        lo, hi = hi, 2.0 * hi
    # Bisect until the bracket stops shrinking: the answer to machine precision.
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return mid
        if below(mid):
            lo = mid
        else:
            hi = mid


@final
@dataclass(frozen=True, slots=True)
class MeanInterval:
    """The mean of a sample and its two-sided Student-t confidence interval.

    With fewer than two values the standard deviation and the interval are NaN.
    """

    #: Number of values.
    n: int
    #: Their arithmetic mean (``math.fsum`` based, so order-independent to rounding).
    mean: float
    #: Sample standard deviation (``n - 1`` in the denominator).
    std: float
    #: ``t_{(1+confidence)/2, n-1} * std / sqrt(n)``.
    halfwidth: float
    #: ``mean - halfwidth``.
    low: float
    #: ``mean + halfwidth``.
    high: float


def check_confidence(confidence: object) -> float:
    """Return *confidence* if it is a number strictly between 0 and 1, else raise ConfigError."""
    if not (
        isinstance(confidence, int | float) and _is_real(confidence) and (0.0 < confidence < 1.0)
    ):
        raise ConfigError(
            f"confidence must be a number strictly between 0 and 1 (e.g. 0.95), got {confidence!r}"
        )
    return float(confidence)


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """Return the mean of *values* and its Student-t confidence interval.

    The interval assumes the values are independent draws (replications with
    independent seeds are) from a distribution whose mean is roughly normal
    at this sample size.

    Args:
        values: The sample, at least one value.
        confidence: The two-sided coverage, in (0, 1).

    Raises:
        ConfigError: *values* is empty or *confidence* is not in (0, 1).
    """
    check_confidence(confidence)
    n = len(values)
    if n == 0:
        raise ConfigError("values must hold at least one number, got an empty sequence")
    mean = math.fsum(values) / n
    if n < 2:
        nan = math.nan
        return MeanInterval(n, mean, nan, nan, nan, nan)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    halfwidth = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return MeanInterval(n, mean, std, halfwidth, mean - halfwidth, mean + halfwidth)
