import os
import sys

import pytest

# Tests run against the installed package; `PYTHONPATH=python` selects an in-tree development build.
import markbase

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true",
                     help="run every fuzz target (tests/fuzz) with 10^4 examples instead of CI's 2,000 "
                          "(the server's, test_server_fuzz.py: 10^5)")


def pytest_configure(config):
    if config.getoption("--fuzz-long"):  # read by tests/fuzz at import, before @settings apply
        os.environ["MARKBASE_FUZZ_EXAMPLES"] = "10000"
        os.environ["MARKBASE_SERVER_FUZZ_EXAMPLES"] = "100000"


def cpu_kernels() -> list[tuple[str, str]]:
    """The CPU kernels this run dispatches to (what the ISA-specific tests could exercise here)."""
    from markbase._core import ops

    flags = []
    if os.path.exists("/proc/cpuinfo"):
        flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags")), [])
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?") \
        if os.path.exists("/proc/cpuinfo") else "?"
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16") if f in flags]
    return [("cpu", f"{model}; {' '.join(isa) or 'no x86 SIMD flags'}"),
            ("f32 GEMM / GEMV", ops._gemm_simd()),
            ("bf16 products", f"supported {ops._gemm_bf16_supported()}, on by default {ops._gemm_bf16_products()}"),
            ("AMX bf16 GEMM", f"supported {ops._gemm_amx_supported()}, on {ops._gemm_amx()}"),
            ("quantized GEMV", f"{ops._quant_gemv_simd()}, byte kernel {ops._quant_gemv_bytes()}"),
            ("attention", ops._attention_simd())]


def pytest_terminal_summary(terminalreporter):
    """Printed at the end of every run (also under -q and xdist): which kernels the tests ran on this CPU."""
    terminalreporter.write_sep("-", "CPU kernels dispatched in this run")
    for what, choice in cpu_kernels():
        terminalreporter.write_line(f"{what}: {choice}")


def pytest_report_header(config):
    return f"markbase {markbase.__version__} from {os.path.dirname(markbase.__file__)}; devices: {markbase.devices()}"


@pytest.fixture(params=markbase.devices())
def device(request):
    """Every backend built into this installation; parity tests compare it with the CPU reference."""
    return request.param
