"""Paths and the clang of the Metal build checks (test_metal_bundle.py, test_metal_cpp_syntax.py).

They FAIL, never skip, when the compiler is missing: the checks are part of what Linux CI proves.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
METAL_DIR = REPO / "metal"
CSRC_DIR = REPO / "csrc"
BUNDLER = REPO / "scripts" / "bundle_metal_sources.py"
TEST_CACHE = REPO / ".test-cache"

NO_CLANG = ("these checks need clang++ 22 or newer (clang++-22, ...; or set MARKBASE_SIM_CLANGXX), the compiler "
            "metal-sim is built with: apt install clang-22")


def clangxx() -> str:
    """The clang++ (>= 22) metal-sim uses, chosen as CMakeLists.txt does."""
    names = [os.environ["MARKBASE_SIM_CLANGXX"]] if os.environ.get("MARKBASE_SIM_CLANGXX") else \
        [f"clang++-{v}" for v in range(22, 28)] + ["clang++"]
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"clang version (\d+)", out)
        if m and int(m.group(1)) >= 22:
            return path
    raise AssertionError(NO_CLANG)


def compile_ok(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Runs a compiler command and fails the test with its diagnostics when it does not succeed."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{what} failed:\n$ {' '.join(map(str, cmd))}\n{r.stderr[-6000:]}"
    return r


def bundle(tmp_path: Path) -> tuple[Path, Path]:
    """Runs the generator; returns (bundled MSL, generated C++)."""
    msl, cpp = tmp_path / "kernels.metal", tmp_path / "metal_kernel_bundle.cpp"
    r = subprocess.run([sys.executable, str(BUNDLER), "--metal-dir", str(METAL_DIR), "--msl", str(msl), "--cpp", str(cpp)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"bundle_metal_sources.py failed:\n{r.stderr}"
    return msl, cpp
