"""Batched decoding (TextDecoder::forward_batch, Session.decode_batch / step_batch, Model.generate_batch):
several sequences, each with its own cache and position, advanced by one step that reads the weights once.
The reference is each sequence run alone through the single-sequence path (itself held to transformers
by the oracle tests).

Policy: batch-invariant, bit for bit. A sequence's logits (np.array_equal) and its sampled tokens do not
depend on how many other sequences share its decode step, nor on their order, at every precision ("auto",
"fast", "f32") and on every device. A batched step runs its linears row-invariant (Exec::row_invariant):
each row takes the decode kernels with the accumulator layout and the activation rounding of a single row
(no GEMM, no kernel chosen by the row count; the MoE experts multiply the same way whether gathered or
grouped). Nothing here is a tolerance: a batch that changes one bit of one logit fails."""

import numpy as np
import pytest

import markbase as mb
from markbase import _core

PROMPTS = ["Tell me a story about a robot.", "Hello", "What is the capital of France? Answer in one word.",
           "Count: one two three", "A longer prompt that runs through a few more positions than the others do.",
           "Why?", "Summarise this sentence.", "Name three colours.", "Translate 'cat' into French.",
           "What comes after Tuesday?"]
FAMILIES = ["e2b", "e4b", "26b", "31b", "12b"]
PRECISIONS = ["auto", "fast", "f32"]
# 1-8: the GEMV sizes (1-4 one pass, 5-8 two); 9 and 16 took the GEMM before row_invariant; 3+ tokens (top-8
# experts: 24 rows) take the 26B's grouped experts where 1-2 take the gathered ones.
CPU_BATCHES = [1, 2, 3, 7, 8, 9, 16]
# metal-sim is a simulator (~1000x slower; a simulated LM head over the real 262,144-entry vocabulary costs
# ~1 s per row): 1, 2 (matvec before too) and 5 (the simdmm GEMM before row_invariant).
SIM_BATCHES = [1, 2, 5]
STEPS = 2  # the second step reads the cache rows the batched first step wrote


@pytest.fixture(scope="module")
def models(synthetic):
    cache = {}

    def get(family, precision="auto", device="cpu", quantize=None):
        key = (family, precision, device, quantize)
        if key not in cache:
            cache[key] = mb.load(synthetic(family), device=device, max_context=256, precision=precision,
                                 quantize=quantize)
        return cache[key]

    return get


def prompt_ids(model, n):
    """n prompts of different lengths (so different positions), token ids."""
    return [model.encode_prompt(PROMPTS[i % len(PROMPTS)])[: 4 + i] for i in range(n)]


def single_steps(model, ids, first):
    """Per sequence: its logits at each of STEPS decode steps run alone, and the tokens fed (greedy after
    `first`)."""
    logits, tokens = [], []
    for i, t in zip(ids, first):
        s = model.session()
        s.prefill(i)
        rows, fed = [], []
        for _ in range(STEPS):
            fed.append(t)
            rows.append(np.asarray(s.decode(t)).reshape(-1).copy())
            t = int(np.argmax(rows[-1]))
        logits.append(rows)
        tokens.append(fed)
    return logits, tokens


def check_batches(model, batches, orders=()):
    """decode_batch over each batch size (the first B sequences) and each order in `orders` equals every
    sequence's single steps bit for bit."""
    n = max([max(batches)] + [len(o) for o in orders])
    ids = prompt_ids(model, n)
    want, fed = single_steps(model, ids, [5 + i for i in range(n)])
    for members in [list(range(b)) for b in batches] + [list(o) for o in orders]:
        sessions = [model.session() for _ in members]
        for s, m in zip(sessions, members):
            s.prefill(ids[m])
        for step in range(STEPS):
            got = _core.gemma4.decode_batch([s._s for s in sessions], np.array([fed[m][step] for m in members], np.int32))
            for s, m, g in zip(sessions, members, got):
                g = np.asarray(g).reshape(-1)
                assert np.array_equal(g, want[m][step]), (
                    f"batch {members}, sequence {m}, step {step}: max |diff| {np.max(np.abs(g - want[m][step]))}")
        assert [s.position for s in sessions] == [len(ids[m]) + STEPS for m in members]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_batch_rows_equal_single_steps(models, synthetic, family, precision):
    """Every batch size, and 16 sequences in a shuffled order, on the CPU."""
    model = models(family, precision)
    order = list(np.random.default_rng(7).permutation(16))
    check_batches(model, CPU_BATCHES, orders=[order])


@pytest.mark.parametrize("family", ["e2b", "26b"])
def test_decode_batch_quantized(models, family):
    """4-bit weights at precision="fast": the byte GEMV with 8-bit activations for any row count."""
    model = models(family, "fast", quantize="q4")
    check_batches(model, [1, 3, 9, 16], orders=[[5, 0, 3, 1, 4, 2, 8, 7, 6]])


@pytest.mark.parametrize("family", ["e2b", "26b"])
def test_decode_batch_metal_sim(models, family):
    assert "metal-sim" in mb.devices(), "metal-sim is not built (it needs clang++ 22 at build time)"
    model = models(family, "auto", device="metal-sim")
    check_batches(model, SIM_BATCHES)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_batch_equals_one_at_a_time(models, family, precision):
    """Greedy and seeded sampling: each prompt's tokens as generate() gives them alone (9 prompts: the batch
    shrinks as sequences finish)."""
    model = models(family, precision)
    prompts = [[{"role": "user", "content": p}] for p in PROMPTS[:9]]
    for opts in ({"temperature": 0}, {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 11}):
        got = model.generate_batch(prompts, max_new_tokens=6, **opts)
        for i, (p, g) in enumerate(zip(prompts, got)):
            alone = dict(opts, seed=opts["seed"] + i) if "seed" in opts else opts
            want = model.generate(p, max_new_tokens=6, **alone)
            assert g.token_ids == want.token_ids and g.text == want.text and g.finish_reason == want.finish_reason
            assert g.prompt_tokens == want.prompt_tokens


def test_step_batch_samples_each_with_its_own_sampler(models):
    model = models("e2b")
    sessions = [model.session() for _ in range(3)]
    for s, p in zip(sessions, PROMPTS):
        s.prefill(model.encode_prompt(p))
    samplers = [_core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                              presence_penalty=0.0, frequency_penalty=0.0, seed=seed) for seed in (1, 2, 3)]
    twins = [model.session() for _ in range(3)]
    twin_samplers = [_core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                                   presence_penalty=0.0, frequency_penalty=0.0, seed=seed) for seed in (1, 2, 3)]
    for s, p in zip(twins, PROMPTS):
        s.prefill(model.encode_prompt(p))
    tokens = [5, 6, 7]
    for _ in range(4):
        got = _core.gemma4.step_batch([s._s for s in sessions], np.array(tokens, np.int32), samplers)
        want = [t._s.step(tok, smp) for t, tok, smp in zip(twins, tokens, twin_samplers)]
        assert list(got) == want
        tokens = want


def test_batch_errors(models, synthetic):
    model = models("e2b")
    a, b = model.session(), model.session()
    a.prefill([2, 5, 6])
    b.prefill([2, 7])
    with pytest.raises(mb.InputError, match="same session"):
        _core.gemma4.decode_batch([a._s, a._s], np.array([1, 2], np.int32))
    with pytest.raises(mb.InputError, match="2 sessions but 3"):
        _core.gemma4.decode_batch([a._s, b._s], np.array([1, 2, 3], np.int32))
    with pytest.raises(mb.InputError, match="no sessions"):
        _core.gemma4.decode_batch([], np.array([], np.int32))
    other = models("31b").session()
    other.prefill([2, 5])
    with pytest.raises(mb.InputError, match="another model"):
        _core.gemma4.decode_batch([a._s, other._s], np.array([1, 2], np.int32))
    full = model.session(max_context=3)
    full.prefill([2, 5, 6])
    with pytest.raises(mb.InputError, match="context limit"):
        _core.gemma4.decode_batch([a._s, full._s], np.array([1, 2], np.int32))
    assert (a.position, b.position) == (3, 2)  # nothing ran
    with pytest.raises(mb.InputError, match="prompts"):
        model.generate_batch("not a list")
