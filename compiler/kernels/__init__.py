"""The device code: each op's functions (its math only), the driver's sync and clock helpers, and
the floor programs ``monobuild bench --floor`` times beside the real ones (the streaming one in
Gluon). ``driver.py`` writes each program's kernel from its op list."""

from .attention import attention_op, attention_prefetch
from .combine import combine_op
from .floor import floor_kernel, floor_streaming_kernel
from .gemv import gemv_op, gemv_prefetch
from .head import argmax_op, embed_op, logits_op
from .moe import experts_down_op, experts_up_op
from .norm import norm_op
from .reduce import gather_op, ranks_argmax_op, reduce_op
from .sample import sample_op, verdict_op

__all__ = ["argmax_op", "attention_op", "attention_prefetch", "combine_op", "embed_op", "experts_down_op",
           "experts_up_op", "floor_kernel", "floor_streaming_kernel", "gather_op", "gemv_op", "gemv_prefetch", "logits_op",
           "norm_op", "ranks_argmax_op", "reduce_op", "sample_op", "verdict_op"]
