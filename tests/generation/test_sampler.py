"""The C++ sampler: filters never pick outside their set, seeds repeat, penalties act as documented."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import Sampler


def logits(n=50, seed=0):
    return np.random.default_rng(seed).normal(0, 2, n).astype(np.float32)


def draws(sampler, z, n=2000):
    return np.array([sampler.sample(z) for _ in range(n)])


def probs(z, t=1.0):
    p = np.exp((z - z.max()) / t)
    return p / p.sum()


def test_temperature_zero_is_greedy():
    z = logits()
    z[17] = z.max() + 1
    assert set(draws(Sampler(temperature=0.0), z, 50)) == {17}


def test_greedy_tie_takes_lowest_index():
    z = np.zeros(10, np.float32)
    z[[3, 7]] = 1.0
    assert Sampler(temperature=0.0).sample(z) == 3


def test_top_k_stays_in_the_top_k():
    z = logits()
    allowed = set(np.argsort(-z)[:5])
    got = set(draws(Sampler(top_k=5, seed=1), z))
    assert got <= allowed and len(got) == 5


def test_top_p_stays_in_the_nucleus():
    z = logits()
    order = np.argsort(-z)
    cum = np.cumsum(probs(z)[order])
    nucleus = set(order[: int(np.searchsorted(cum, 0.7) + 1)])
    got = set(draws(Sampler(top_p=0.7, seed=2), z))
    assert got <= nucleus and len(got) == len(nucleus)


def test_min_p_drops_unlikely_tokens():
    z = logits()
    p = probs(z)
    allowed = set(np.flatnonzero(p >= 0.2 * p.max()))
    got = set(draws(Sampler(min_p=0.2, seed=3), z))
    assert got <= allowed and len(got) == len(allowed)


def test_sampling_frequencies_follow_the_distribution():
    z = logits(8, seed=5)
    counts = np.bincount(draws(Sampler(temperature=0.7, seed=4), z, 20000), minlength=8) / 20000
    np.testing.assert_allclose(counts, probs(z, 0.7), atol=0.015)


def test_same_seed_same_tokens_other_seed_differs():
    z = logits(1000)
    a = draws(Sampler(seed=42), z, 200)
    b = draws(Sampler(seed=42), z, 200)
    c = draws(Sampler(seed=43), z, 200)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_repetition_penalty_covers_the_prompt():
    z = np.array([2.0, 1.9, -1.0], np.float32)
    s = Sampler(temperature=0.0, repetition_penalty=2.0)
    s.observe_prompt(np.array([0]))
    assert s.sample(z) == 1  # 2.0 / 2 = 1.0 < 1.9


def test_presence_and_frequency_penalties_count_generated_tokens():
    z = np.array([3.0, 2.5, 0.0], np.float32)
    s = Sampler(temperature=0.0, presence_penalty=1.0)
    assert s.sample(z) == 0  # then 3.0 - 1.0 = 2.0 < 2.5
    assert s.sample(z) == 1
    f = Sampler(temperature=0.0, frequency_penalty=0.3)
    seq = [f.sample(z) for _ in range(4)]
    assert seq == [0, 0, 1, 0]  # 3.0, 2.7 > 2.5, 2.4 < 2.5, then 2.4 vs 2.2


def test_nan_logits_rejected():
    with pytest.raises(mb.InputError, match="NaN"):
        Sampler().sample(np.array([0.0, np.nan], np.float32))


@pytest.mark.parametrize("kw, name", [({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"),
                                      ({"top_p": 1.5}, "top_p"), ({"top_k": -2}, "top_k"), ({"min_p": 1.0}, "min_p"),
                                      ({"repetition_penalty": 0.0}, "repetition_penalty")])
def test_bad_parameters(kw, name):
    with pytest.raises(mb.InputError, match=name):
        Sampler(**kw)
