import pytest


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """family -> a tiny synthetic checkpoint written by markbase.testing (no torch involved)."""
    from markbase.testing import make_checkpoint

    root = tmp_path_factory.mktemp("synthetic")
    cache = {}

    def get(family="e2b"):
        if family not in cache:
            cache[family] = make_checkpoint(root / family, family=family, size="tiny", dtype="bf16", seed=1)
        return cache[family]

    return get


@pytest.fixture(scope="session")
def synth_model(synthetic):
    import markbase as mb

    cache = {}

    def get(family="e2b"):
        if family not in cache:
            cache[family] = mb.load(synthetic(family))
        return cache[family]

    return get
