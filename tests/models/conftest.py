import os

import pytest


@pytest.fixture(scope="session")
def oracle():
    """family -> directory with f32/, bf16/ and reference.npz, built by transformers (cached on disk).

    Needs torch and transformers: without them this fixture errors, so the oracle tests fail (never skip).
    """
    from oracle.families import build_all

    return build_all()


_MODELS = {}


@pytest.fixture(scope="session")
def load_model(oracle):
    import markbase as mb

    def get(family: str, dtype: str = "f32", **kw):
        key = (family, dtype, tuple(sorted(kw.items())))
        if key not in _MODELS:
            _MODELS[key] = mb.load(os.path.join(oracle[family], dtype), **kw)
        return _MODELS[key]

    return get
