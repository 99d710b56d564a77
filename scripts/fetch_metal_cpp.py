#!/usr/bin/env python3
"""Fetches Apple's metal-cpp headers for the Linux type check of the Metal launcher
(tests/metal/test_metal_cpp_syntax.py) into .test-cache/metal-cpp/: they ship inside PyPI's mlx-metal
macOS wheel, which pip downloads (no install). Part of the test setup (README, .ci/run); idempotent."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MLX_METAL = "mlx-metal==0.32.4"  # its macOS wheel carries metal-cpp under mlx/include/metal_cpp/
WHEEL_PREFIX = "mlx/include/metal_cpp/"
PARTS = ("Foundation/", "Metal/", "QuartzCore/", "LICENSE.txt", "README.md")
TEST_CACHE = Path(__file__).resolve().parents[1] / ".test-cache"
METAL_CPP = TEST_CACHE / "metal-cpp"


def fetched() -> bool:
    marker = METAL_CPP / "FROM"
    return marker.is_file() and marker.read_text().strip() == MLX_METAL


def fetch() -> Path:
    if fetched():
        return METAL_CPP
    TEST_CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=TEST_CACHE) as tmp:  # same file system: the final rename is atomic
        r = subprocess.run([sys.executable, "-m", "pip", "download", MLX_METAL, "--platform", "macosx_14_0_arm64",
                            "--only-binary=:all:", "--no-deps", "-d", tmp], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            sys.exit(f"could not download {MLX_METAL} (metal-cpp headers) from PyPI:\n{r.stderr}")
        staging = Path(tmp) / "metal-cpp"
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                rel = name[len(WHEEL_PREFIX):]
                if name.startswith(WHEEL_PREFIX) and rel.startswith(PARTS) and not name.endswith("/"):
                    (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                    (staging / rel).write_bytes(z.read(name))
        if not (staging / "Metal" / "Metal.hpp").is_file():
            sys.exit(f"{wheels[0].name} holds no {WHEEL_PREFIX}Metal/Metal.hpp")
        (staging / "FROM").write_text(MLX_METAL + "\n")
        shutil.rmtree(METAL_CPP, ignore_errors=True)
        staging.rename(METAL_CPP)
    return METAL_CPP


if __name__ == "__main__":
    print(f"metal-cpp headers in {fetch()}")
