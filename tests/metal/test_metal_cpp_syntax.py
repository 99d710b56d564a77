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

import subprocess
from pathlib import Path

import pytest

from .toolchain import CSRC_DIR, METAL_DIR, REPO, TEST_CACHE, clangxx, compile_ok

METAL_CPP = TEST_CACHE / "metal-cpp"
STUBS = Path(__file__).resolve().parent / "apple_stubs"
APPLE_SOURCES = sorted((CSRC_DIR / "backend" / "metal" / "apple").glob("*.cpp"))


@pytest.fixture(scope="module")
def metal_cpp():
    """Apple's headers, fetched by the test setup (scripts/fetch_metal_cpp.py, run by .ci/run and the README's
    test command); missing headers fail the test, they are never downloaded from inside it."""
    assert (METAL_CPP / "Metal" / "Metal.hpp").is_file(), (
        f"no metal-cpp headers in {METAL_CPP}: run `python3 scripts/fetch_metal_cpp.py` first (part of the test setup)")
    return METAL_CPP


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
