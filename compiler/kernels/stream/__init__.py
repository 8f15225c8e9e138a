"""The streaming executor for sm_90, in Gluon: the device functions of the programs that
``driver.py`` writes (a loader warp streaming every GEMV's weights, attention's KV tiles and,
once the band is routed, the chosen experts' weights through a shared-memory ring; compute warps
running the ops). Gluon does not run under Triton's interpreter; the same ops' Triton executor
(``monobuild.compiler.kernels``) keeps the CPU numerics."""

from .attention import load_kv, stream_attention, stream_attention_prefetch
from .gemv import load_weights, stream_gemv
from .layouts import tile_smem
from .moe import load_experts_down, load_experts_up, stream_experts_down, stream_experts_up
from .rowwise import combine_op, norm_op
from .sync import clock_end, clock_start, grid_dependency_wait, launch_dependents, signal, step_target, wait

__all__ = ["clock_end", "clock_start", "combine_op", "grid_dependency_wait", "launch_dependents", "load_kv",
           "load_experts_down", "load_experts_up", "load_weights", "norm_op", "signal", "step_target",
           "stream_attention", "stream_attention_prefetch", "stream_experts_down", "stream_experts_up", "stream_gemv",
           "tile_smem", "wait"]
