"""The kernel source the Metal launcher compiles at runtime (scripts/bundle_metal_sources.py), checked on Linux.

What this proves: the generated single MSL source holds every kernel metal-sim runs (all but the sim's
self-tests) and no other; it names no project header; in the Apple world (__METAL_VERSION__ defined) it
needs nothing but <metal_stdlib>; it compiles as metal-sim C++ with clang, which also shows that all the
.metal files coexist in ONE translation unit, as Metal compiles them; and the generated C++ string
reproduces it byte for byte.
What it does not prove: that Apple's Metal compiler accepts the source (no MSL compiler runs on Linux).
Kernels are stamped out by macros, so kernel names are read from the Apple-world preprocessor output.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .sim import require_sim
from .toolchain import BUNDLER, METAL_DIR, apple_preprocess, bundle, clangxx, compile_ok

KERNEL_RE = re.compile(r"\bkernel\s+void\s+(\w+)\s*\(")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    return bundle(tmp_path_factory.mktemp("bundle"))


def test_bundle_holds_exactly_the_sim_kernels(bundled, tmp_path):
    msl, _ = bundled
    sim_kernels = set(require_sim().kernels())
    apple_kernels = KERNEL_RE.findall(apple_preprocess(msl, tmp_path))
    self_tests = set()
    for f in sorted((METAL_DIR / "tests").glob("*.metal")):
        self_tests |= set(KERNEL_RE.findall(apple_preprocess(f, tmp_path, METAL_DIR)))
    assert self_tests, "no self-test kernels found in metal/tests/ (the sim's self-tests are expected there)"
    assert len(apple_kernels) == len(set(apple_kernels)), "a kernel is defined twice in the bundle"
    missing = sorted(sim_kernels - self_tests - set(apple_kernels))
    assert not missing, f"kernels registered in metal-sim but absent from the Metal bundle: {missing}"
    unregistered = sorted(set(apple_kernels) - sim_kernels)
    assert not unregistered, f"bundled kernels metal-sim does not register (so never tested): {unregistered}"
    assert not set(apple_kernels) & self_tests, "the sim's self-test kernels must not be bundled"


def test_bundle_names_no_project_header(bundled):
    text = bundled[0].read_text(encoding="utf-8")
    assert '#include "' not in text
    includes = set(re.findall(r"^\s*#\s*include\s*<([^>]+)>", text, re.M))
    apple_and_cpp = {i for i in includes if not i.startswith("sim/")}
    assert apple_and_cpp == {"metal_stdlib", "cstdint"}, f"unexpected includes in the bundle: {sorted(includes)}"
    # Each kernel file and each header it uses is in the bundle exactly once.
    starts = re.findall(r'^#line 1 "([^"]+)"$', text, re.M)
    assert len(starts) == len(set(starts)), f"a file is bundled twice: {starts}"
    assert {p.name for p in METAL_DIR.glob("*.metal")} <= set(starts)
    assert {"kernel_common.h", "kernel_args.h", "norm_reduce.h"} <= set(starts)
    assert not any(s.startswith(("tests/", "sim/")) for s in starts)


def test_bundle_needs_only_metal_stdlib_on_apple(bundled, tmp_path):
    # No metal/ include path and no C++ headers: any include other than <metal_stdlib> fails here.
    out = apple_preprocess(bundled[0], tmp_path)
    assert "using namespace metal;" in out


def test_bundle_compiles_as_metal_sim_cpp(bundled):
    # Same language flags as the metal-sim build (CMakeLists.txt), one translation unit for all kernels.
    cmd = [clangxx(), "-fsyntax-only", "-x", "c++", "-std=c++20", "-ffp-contract=off", "-fno-fast-math",
           "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unknown-attributes", f"-I{METAL_DIR}", str(bundled[0])]
    compile_ok(cmd, "compiling the bundle as metal-sim C++")


def test_generated_cpp_reproduces_the_bundle(bundled, tmp_path):
    msl, cpp = bundled
    main = tmp_path / "print_bundle.cpp"
    main.write_text('#include <cstdio>\nnamespace mb::metal { const char* kernel_source_bundle(); }\n'
                    'int main() { std::fputs(mb::metal::kernel_source_bundle(), stdout); return 0; }\n')
    exe = tmp_path / "print_bundle"
    compile_ok([clangxx(), "-std=c++20", "-O0", "-Wall", "-Wextra", str(cpp), str(main), "-o", str(exe)],
               "building the generated kernel_source_bundle()")
    printed = subprocess.run([str(exe)], capture_output=True, check=True).stdout
    assert printed == msl.read_bytes()


@pytest.mark.parametrize("source, message", [
    ('#ifdef X\n#include "a.h"\n#endif\n', 'inside #if'),
    ('#include "missing.h"\n', "is not a file under"),
])
def test_generator_refuses_what_it_cannot_inline(tmp_path, source, message):
    (tmp_path / "a.h").write_text("#pragma once\nint a;\n")
    (tmp_path / "k.metal").write_text(source)
    r = subprocess.run([sys.executable, str(BUNDLER), "--metal-dir", str(tmp_path), "--msl", str(tmp_path / "out.metal")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr, r.stderr
