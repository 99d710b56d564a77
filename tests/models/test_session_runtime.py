"""The C++ session's decode step: logits in a session-owned buffer, sampling in C++, and no heap allocation
per step (the arena, the KV cache, the logits buffer, the sampler's tables and every view are reused)."""

import numpy as np
import pytest

import markbase as mb
from markbase import _core
from oracle.families import FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_steps_allocate_nothing_on_cpu(oracle, load_model, family):
    model = load_model(family)
    sess = model.session()
    sess.prefill([2, 5, 6, 7, 8, 9])
    sampler = _core.Sampler(temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.1, seed=3)
    sampler.observe_prompt(np.array([2, 5, 6, 7, 8, 9], np.int32))
    # The first steps size the sampler's per-token tables once: the counter sees those allocations.
    first = _core.gemma4._heap_allocations_over_steps(sess._s, 5, sampler, 2)
    assert first > 0
    # Pool workers grow their thread-local scratch (one-time) the first time the dynamic split hands them
    # a given op, which can happen after the warm-up; a per-step allocation shows in every window.
    windows = [_core.gemma4._heap_allocations_over_steps(sess._s, 5, sampler, 32) for _ in range(3)]
    assert 0 in windows, f"heap allocations in each of three 32-step windows: {windows}"


def test_step_returns_what_decode_then_sample_returns(oracle, load_model):
    model = load_model("e2b")
    a, b = model.session(), model.session()
    sa, sb = _core.Sampler(temperature=0.7, seed=4), _core.Sampler(temperature=0.7, seed=4)
    a.prefill([2, 10, 11, 12])
    b.prefill([2, 10, 11, 12])
    ta, tb = a.sample(sa), b.sample(sb)
    for _ in range(10):
        ta = a.step(ta, sa)
        b.decode(tb)
        tb = b.sample(sb)
        assert ta == tb


def test_sample_needs_logits_and_context_limit_is_enforced(oracle, load_model):
    model = load_model("e2b")
    sess = model.session(max_context=4)
    with pytest.raises(mb.InputError, match="no logits"):
        sess.sample(_core.Sampler(temperature=0.0))
    sess.prefill([2, 3, 4, 5])
    with pytest.raises(mb.InputError, match="context limit"):
        sess.decode(6)
