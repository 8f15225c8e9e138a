"""The Triton sources of every program (one source, two modes: persistent and staged)."""

from .head import embed_kernel, head_kernel
from .layer import layer_kernel

__all__ = ["embed_kernel", "head_kernel", "layer_kernel"]
