"""The streaming executor for sm_90, in Gluon: the device functions of the programs that
``driver.py`` writes (a loader warp streaming every GEMV's weights through a shared-memory ring,
compute warps running the ops). Gluon does not run under Triton's interpreter; the same ops'
Triton executor (``monobuild.compiler.kernels``) keeps the CPU numerics."""

from .attention import attention_op, attention_prefetch
from .gemv import load_weights, stream_gemv
from .layouts import tile_smem
from .rowwise import combine_op, norm_op
from .sync import clock_end, clock_start, grid_dependency_wait, launch_dependents, signal, step_target, wait

__all__ = ["attention_op", "attention_prefetch", "clock_end", "clock_start", "combine_op", "grid_dependency_wait",
           "launch_dependents", "load_weights", "norm_op", "signal", "step_target", "stream_gemv", "tile_smem", "wait"]
