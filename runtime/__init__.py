"""The thin runtime: load a package, bind weights and the paged KV cache in place, run the step.

Imports torch and the GPU vendor's driver binding only (never Triton or the compiler)::

    from monobuild import runtime
    pkg = runtime.load("build/llama-3.2-1b-sm_90/sm_90")
    step = pkg.bind(state_dict_or_safetensors_dir, pkg.allocate_kv_cache(num_blocks))
    next_ids = step(input_ids, positions, block_tables, context_lens)
"""

from ..manifest import PackageError, read_manifest
from .buffers import Sampling
from .checkpoint import CheckpointError, SafetensorsCheckpoint
from .hangs import WaitTimeout
from .kvcache import KVCache, KVCacheError
from .package import DeviceRefused, Package, load
from .step import DecodeStep, StepInputError
from .weights import WeightError

__all__ = ["CheckpointError", "DecodeStep", "DeviceRefused", "KVCache", "KVCacheError", "Package", "PackageError",
           "Sampling", "SafetensorsCheckpoint", "StepInputError", "WaitTimeout", "WeightError", "load",
           "read_manifest"]
