"""docs/architecture.md stays true to the tree: every file or folder path it names exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"

# Paths as the page writes them: csrc/..., metal/..., tests/..., python/..., bench/, docs/..., and the
# short forms `backend/...`, `ops/...`, `runtime/...` relative to csrc/.
PATH = re.compile(r"`?((?:csrc|metal|tests|python|bench|docs|backend|ops|runtime|core|io|models)/[\w./<>-]*)`?")


def named_paths(text: str) -> set[str]:
    out = set()
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,)")
        if "<" in p:  # a pattern such as ops/<family>.cpp
            continue
        out.add(p)
    return out


def test_every_path_in_architecture_md_exists():
    paths = named_paths(DOC.read_text())
    assert len(paths) > 30
    missing = []
    for p in sorted(paths):
        candidates = [REPO / p, REPO / "csrc" / p, REPO / "csrc" / "models" / "gemma4" / p,
                      REPO / "csrc" / "backend" / "metal" / p]
        if not any(c.exists() for c in candidates):
            missing.append(p)
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
