"""Fuzz targets (tests/fuzz): deterministic (derandomized: the same examples on every run), 2,000 examples
per target in CI, 10^4 with `pytest --fuzz-long` (tests/conftest.py sets MARKBASE_FUZZ_EXAMPLES, read when
the test module is imported: after this file, which pytest loads before the option is seen). The only
outcomes a target allows are a result or a MarkbaseError subclass; anything else (another exception, a
crash, a hang past the deadline) fails."""
