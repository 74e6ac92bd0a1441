"""LatencyModel: seeded, bounded below by min_duration, validated."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.errors import ConfigError
from simulacra.llm import Completion, CompletionRequest, LatencyModel

REQUEST = CompletionRequest.chat("one two three four five six")
seconds = st.floats(0, 5, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    seconds,
    st.floats(0, 0.01),
    st.floats(0, 0.1),
    st.floats(0, 3),
    st.floats(1e-6, 5),
    st.integers(0, 100_000),
    st.integers(0, 100_000),
    st.integers(0, 2**64),
)
def test_durations_are_bounded_and_seeded(  # noqa: PLR0917  (Hypothesis passes them by position)
    base: float,
    prefill: float,
    decode: float,
    sigma: float,
    minimum: float,
    prompt: int,
    generated: int,
    seed: int,
) -> None:
    model = LatencyModel(base, prefill, decode, sigma, minimum)
    completion = Completion("x", prompt_tokens=prompt, completion_tokens=generated)
    first = model.duration(REQUEST, completion, random.Random(seed))
    again = model.duration(REQUEST, completion, random.Random(seed))
    assert first == again
    assert math.isfinite(first)
    assert first >= model.min_duration
    if sigma == 0 and prompt and generated:  # 0 tokens: estimated from the texts instead
        assert first == pytest.approx(model.mean(prompt, generated))


def test_each_call_draws_once_from_the_stream() -> None:
    rng = random.Random(4)
    model = LatencyModel(noise_sigma=0.0)
    model.duration(REQUEST, Completion("a b"), rng)
    reference = random.Random(4)
    reference.lognormvariate(0.0, 0.0)
    assert rng.getstate() == reference.getstate()


def test_noise_has_mean_one() -> None:
    model = LatencyModel(
        base=1.0, prefill_per_token=0, decode_per_token=0, noise_sigma=0.5, min_duration=1e-9
    )
    rng = random.Random(0)
    draws = [model.duration(REQUEST, Completion("x"), rng) for _ in range(20_000)]
    assert sum(draws) / len(draws) == pytest.approx(1.0, abs=0.03)


def test_tokens_are_estimated_when_the_completion_reports_none() -> None:
    model = LatencyModel(
        base=0, prefill_per_token=1, decode_per_token=10, noise_sigma=0, min_duration=0.001
    )
    duration = model.duration(REQUEST, Completion("a b c"), random.Random(0))
    assert duration == 8 + 10 * 4  # 6 prompt words -> 8 tokens, 3 words -> 4 tokens


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"base": -1}, "LatencyModel.base must be a finite number >= 0"),
        ({"decode_per_token": float("nan")}, "decode_per_token"),
        ({"noise_sigma": float("inf")}, "noise_sigma"),
        ({"prefill_per_token": True}, "prefill_per_token"),
        ({"min_duration": 0}, "min_duration must be > 0"),
    ],
)
def test_bad_parameters_name_the_field(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LatencyModel(**kw)  # type: ignore[arg-type]


def test_from_dict_and_fixed() -> None:
    model = LatencyModel.from_dict({"base": 1, "noise_sigma": 0})
    assert model == LatencyModel(base=1.0, noise_sigma=0.0)
    assert LatencyModel.from_dict(model.to_dict()) == model
    with pytest.raises(ConfigError, match="unknown latency setting"):
        LatencyModel.from_dict({"bse": 1})
    fixed = LatencyModel.fixed(0.25)
    assert fixed.duration(REQUEST, Completion("a " * 50), random.Random(1)) == 0.25
    assert fixed.min_duration == 0.25
