"""markbase: a native inference engine for the Gemma 4 model family."""

from . import _core
from ._core import (
    CheckpointError,
    ConfigError,
    DeviceError,
    InputError,
    MarkbaseError,
    NumericsError,
    Tensor,
)

from . import io
from .api import Model, Session, load
from .validate import Report, validate

__version__: str = _core.__version__


def devices() -> list[str]:
    """The backends this installation can run here, in order of preference: "metal" (built on macOS and a
    Metal GPU present), "cpu", "metal-sim" (built when clang 22+ was found). device="auto" selects "cpu"
    until the Metal backend has been verified on Apple hardware."""
    return list(_core.devices())


__all__ = [
    "__version__",
    "devices",
    "load",
    "validate",
    "Model",
    "Session",
    "Report",
    "Tensor",
    "MarkbaseError",
    "CheckpointError",
    "ConfigError",
    "InputError",
    "DeviceError",
    "NumericsError",
]
