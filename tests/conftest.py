import os
import sys

import pytest

# Tests run against the installed package; `PYTHONPATH=python` selects an in-tree development build.
import markbase

sys.path.insert(0, os.path.dirname(__file__))


def pytest_report_header(config):
    return f"markbase {markbase.__version__} from {os.path.dirname(markbase.__file__)}; devices: {markbase.devices()}"


@pytest.fixture(params=markbase.devices())
def device(request):
    """Every backend built into this installation; parity tests compare it with the CPU reference."""
    return request.param
