"""markbase works in a process whose global operator new / delete are not malloc and free.

The extension counts its own heap allocations with a local operator new / delete (core/alloc_count.cpp).
Memory crosses into libstdc++ and back (a std::string grown inside libstdc++ is freed by code inlined into
the extension, and the reverse), so those local operators must hand out and take back memory through the
process's global operators. A host app with its own allocator, or a sanitizer runtime, replaces them:
here a preloaded replacement that tags its blocks (tests/native/tagged_new.cpp) aborts on any mismatch.
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Error messages (std::ostringstream), a checkpoint load and a generation: the paths where strings,
# vectors and exceptions cross between libstdc++ and the extension.
CHILD = r"""
import tempfile
import numpy as np
import markbase as mb
from markbase import _core
from markbase.testing import make_checkpoint
try:
    _core.ops.rms_norm(_core.Tensor(np.zeros((2, 3), np.float32)), _core.Tensor(np.zeros(4, np.float32)), eps=1e-6)
    raise SystemExit("a mismatched rms_norm was accepted")
except mb.MarkbaseError as e:
    assert "4" in str(e), e
with tempfile.TemporaryDirectory() as d:
    model = mb.load(make_checkpoint(d, "e2b"))
    text = model.chat([{"role": "user", "content": "Hello there"}], max_new_tokens=6, temperature=0.0)
    print("ok", len(text))
"""


def test_extension_uses_the_process_operator_new(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    assert cxx, "a C++ compiler is needed to build the preloaded allocator"
    lib = tmp_path / "libtagged_new.so"
    subprocess.run([cxx, "-O1", "-shared", "-fPIC", os.path.join(HERE, "native", "tagged_new.cpp"), "-o", str(lib)],
                   check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib))
    res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"child failed ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert res.stdout.strip().startswith("ok"), res.stdout
