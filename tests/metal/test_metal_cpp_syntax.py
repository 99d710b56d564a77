"""The Metal launcher (csrc/backend/metal/apple/*.cpp) type-checked against Apple's real metal-cpp on Linux.

What this proves: our code compiles (clang -fsyntax-only, warnings as errors) against the actual metal-cpp
headers (the macOS 26 release, as shipped inside PyPI's mlx-metal wheel): every class, method, overload,
enum and option we call exists with the argument types we pass, and metal-cpp's own inline code and its
private implementation (metal_cpp_impl.cpp) instantiate cleanly with our usage.
What it does not prove: nothing runs, and no Metal device is touched; the MSL kernels are not compiled by
Apple's compiler (test_metal_bundle.py checks the bundle as far as Linux can); the macOS system headers
are stubs declaring only what metal-cpp uses (tests/metal/apple_stubs/); the check runs for the x86-64
Linux target, so metal-cpp picks its x86-64 message-send branches where an Apple-silicon build picks the
arm64 ones; linking against the frameworks is not checked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from .toolchain import CSRC_DIR, METAL_DIR, REPO, TEST_CACHE, clangxx, compile_ok

MLX_METAL = "mlx-metal==0.32.4"  # its macOS wheel carries metal-cpp under mlx/include/metal_cpp/
WHEEL_PREFIX = "mlx/include/metal_cpp/"
PARTS = ("Foundation/", "Metal/", "QuartzCore/", "LICENSE.txt", "README.md")
METAL_CPP = TEST_CACHE / "metal-cpp"
STUBS = Path(__file__).resolve().parent / "apple_stubs"
APPLE_SOURCES = sorted((CSRC_DIR / "backend" / "metal" / "apple").glob("*.cpp"))


def fetch_metal_cpp() -> Path:
    """Apple's metal-cpp headers, extracted once from the mlx-metal wheel into .test-cache/metal-cpp/."""
    marker = METAL_CPP / "FROM"
    if marker.is_file() and marker.read_text().strip() == MLX_METAL:
        return METAL_CPP
    TEST_CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=TEST_CACHE) as tmp:  # same file system: the final rename is atomic
        r = subprocess.run([sys.executable, "-m", "pip", "download", MLX_METAL, "--platform", "macosx_14_0_arm64",
                            "--only-binary=:all:", "--no-deps", "-d", tmp], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        assert r.returncode == 0 and wheels, f"could not download {MLX_METAL} (metal-cpp headers) from PyPI:\n{r.stderr}"
        staging = Path(tmp) / "metal-cpp"
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                rel = name[len(WHEEL_PREFIX):]
                if name.startswith(WHEEL_PREFIX) and rel.startswith(PARTS) and not name.endswith("/"):
                    (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                    (staging / rel).write_bytes(z.read(name))
        assert (staging / "Metal" / "Metal.hpp").is_file(), f"{wheels[0].name} holds no {WHEEL_PREFIX}Metal/Metal.hpp"
        (staging / "FROM").write_text(MLX_METAL + "\n")
        shutil.rmtree(METAL_CPP, ignore_errors=True)
        staging.rename(METAL_CPP)
    return METAL_CPP


@pytest.fixture(scope="module")
def metal_cpp():
    return fetch_metal_cpp()


def syntax_check(source: Path, metal_cpp: Path, what: str):
    # The _core flags that matter for type checking, plus the Apple build's define and include paths.
    cmd = [clangxx(), "-fsyntax-only", "-fblocks", "-std=c++20", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
           "-DMARKBASE_HAS_METAL=1", f"-I{CSRC_DIR}", f"-I{METAL_DIR}", "-isystem", str(metal_cpp),
           "-isystem", str(STUBS), str(source)]
    return compile_ok(cmd, what)


def test_apple_sources_present():
    names = {p.name for p in APPLE_SOURCES}
    assert {"launcher_mtl.cpp", "metal_cpp_impl.cpp"} <= names, names


@pytest.mark.parametrize("source", APPLE_SOURCES, ids=lambda p: p.name)
def test_apple_source_compiles_against_metal_cpp(source, metal_cpp):
    syntax_check(source, metal_cpp, f"syntax check of {source.relative_to(REPO)} against metal-cpp")


def test_check_catches_metal_cpp_misuse(metal_cpp, tmp_path):
    # The check is not vacuous: a call metal-cpp does not have (setBuffer without an offset) is rejected.
    bad = tmp_path / "misuse.cpp"
    bad.write_text("#include <Metal/Metal.hpp>\n"
                   "void f(MTL::ComputeCommandEncoder* e, MTL::Buffer* b) { e->setBuffer(b, 0); }\n")
    cmd = [clangxx(), "-fsyntax-only", "-fblocks", "-std=c++20", "-isystem", str(metal_cpp), "-isystem", str(STUBS), str(bad)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode != 0 and "setBuffer" in r.stderr, r.stderr
