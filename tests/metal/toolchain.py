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


def bundle(tmp_path: Path, metal_dir: Path = METAL_DIR) -> tuple[Path, Path]:
    """Runs the generator (on metal/, or a copy of it); returns (bundled MSL, generated C++)."""
    msl, cpp = tmp_path / "kernels.metal", tmp_path / "metal_kernel_bundle.cpp"
    cmd = [sys.executable, str(BUNDLER), "--metal-dir", str(metal_dir), "--msl", str(msl), "--cpp", str(cpp)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"bundle_metal_sources.py failed:\n{r.stderr}"
    return msl, cpp


def apple_preprocess(source: Path, tmp_path: Path, *include_dirs, linemarkers: bool = False) -> str:
    """The source as Metal's preprocessor sees it: __METAL_VERSION__ set, no C++ library, and only an
    empty stand-in for <metal_stdlib> (plus include_dirs) on the include path. linemarkers: keep the
    `# N "file"` lines (from the bundle's #line directives) so findings can name the original file."""
    sdk = tmp_path / "apple_sdk"
    sdk.mkdir(exist_ok=True)
    (sdk / "metal_stdlib").write_text("// stands in for Apple's <metal_stdlib>\n")
    cmd = [clangxx(), "-E", *([] if linemarkers else ["-P"]), "-x", "c++", "-std=c++20", "-nostdinc", "-nostdinc++",
           "-D__METAL_VERSION__=310", "-I", str(sdk), *[f"-I{d}" for d in include_dirs], str(source)]
    return compile_ok(cmd, f"Apple-world preprocessing of {source.name}").stdout
