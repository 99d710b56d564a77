import os
import sys

import pytest

# Tests run against the installed package; `PYTHONPATH=python` selects an in-tree development build.
import markbase

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true",
                     help="run every fuzz target (tests/fuzz) with 10^4 examples instead of CI's 2,000")


def pytest_configure(config):
    if config.getoption("--fuzz-long"):  # read by tests/fuzz at import, before @settings apply
        os.environ["MARKBASE_FUZZ_EXAMPLES"] = "10000"


def pytest_report_header(config):
    return f"markbase {markbase.__version__} from {os.path.dirname(markbase.__file__)}; devices: {markbase.devices()}"


@pytest.fixture(params=markbase.devices())
def device(request):
    """Every backend built into this installation; parity tests compare it with the CPU reference."""
    return request.param
