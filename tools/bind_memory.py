"""What binding a package costs in device memory, measured: the CUDA allocator's bytes before and
after ``pkg.bind`` over random weights already on the GPU (HF-named, and the same weights fused
as vLLM holds q/k/v and gate/up), against what ``monobuild inspect`` reports from the manifest
(``monobuild.footprint``), and whether every weight the step reads is the engine's own tensor.

Runs on a GPU with compiled packages::

    python tools/bind_memory.py DIR/llama-3.2-1b-sm_90/sm_90 [DIR/qwen3-8b-sm_90/sm_90 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from monobuild.bench.checkpoints import fused_like_vllm, random_hf_state_dict
from monobuild.footprint import footprint
from monobuild.runtime import load
from monobuild.runtime.weights import PROJECTIONS


def measure(package: Path, layout: str) -> str:
    pkg = load(package)
    g, d = pkg.geometry, pkg.manifest.deployment
    sd = random_hf_state_dict(g, pkg.dtype, torch.Generator("cuda").manual_seed(0), d.quant)
    if layout == "vllm":
        sd = fused_like_vllm(sd, g.layers)
    kv = pkg.allocate_kv_cache(-(-d.max_context // d.kv_cache.block_size))
    engine = {t.untyped_storage().data_ptr() for t in sd.values()}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    mode = d.modes[0]
    step = pkg.bind(sd, kv, mode=mode)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    weights = [t for layer in step.weights.layers for name in ("attn_norm", "mlp_norm", *sum(PROJECTIONS.values(), ()))
               for t in (getattr(layer, name), getattr(layer, name + "_scale", None)) if t is not None]
    shared = all(t.untyped_storage().data_ptr() in engine for t in weights)
    reported = footprint(pkg.manifest, mode).total
    held = sum(t.numel() * t.element_size() for t in sd.values())
    line = (f"{package.parent.name:<28} {layout:<5} {mode:<10} weights {held / 1e9:6.2f} GB"
            f"  bind allocated {grown / 1e6:8.2f} MB  inspect reports {reported / 1e6:8.2f} MB"
            f"  every weight the engine's: {'yes' if shared else 'NO'}")
    del step, sd, kv
    torch.cuda.empty_cache()
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("packages", type=Path, nargs="+")
    args = ap.parse_args()
    for package in args.packages:
        for layout in ("hf", "vllm"):
            print(measure(package, layout), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
