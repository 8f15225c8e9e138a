"""The Triton sources of every program (one source, two modes: persistent and staged), and the
floor programs ``monobuild bench --floor`` times beside them (the streaming one in Gluon)."""

from .floor import floor_kernel, floor_streaming_kernel
from .head import embed_kernel, head_kernel
from .layer import layer_kernel

__all__ = ["embed_kernel", "floor_kernel", "floor_streaming_kernel", "head_kernel", "layer_kernel"]
