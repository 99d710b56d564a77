from generation.conftest import synthetic  # noqa: F401  (the tiny synthetic checkpoints, shared)
