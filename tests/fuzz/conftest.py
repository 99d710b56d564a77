"""Fuzz settings (tests/fuzz): deterministic (derandomized: the same examples on every run), 2,000
examples per target in CI, 10^4 with `pytest --fuzz-long`. The only outcomes a target allows are a
result or a MarkbaseError subclass; anything else (another exception, a crash, a hang past the deadline)
fails."""

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("MARKBASE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=10),
                suppress_health_check=list(HealthCheck))
