"""Test support that needs no torch: synthetic checkpoints (`make_checkpoint`), the test tokenizer and chat
template (`tokenizer_build`), and the five released configs (`released.RELEASED`).

Used by `markbase demo`, the tests and the benchmarks; not part of the inference path.
"""

from .checkpoints import FAMILIES, make_checkpoint, tiny_config

__all__ = ["FAMILIES", "make_checkpoint", "tiny_config"]
