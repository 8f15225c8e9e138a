"""What a code object needs from an SM/CU, read without a GPU, and how many CTAs fit.

sm_90: ``cuobjdump --dump-resource-usage`` (bundled with Triton's wheel) on the cubin gives
registers, stack and local memory; shared memory is Triton's dynamic allocation plus what the
cubin declares. gfx9: the AMDGCN text's kernel descriptor gives VGPR/AGPR/SGPR counts, spills,
the private segment and LDS.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .targets import Target


@dataclass(frozen=True)
class Resources:
    registers: int  # per thread (VGPRs + AGPRs on AMD)
    spill_bytes: int  # registers spilled to local/scratch memory, per thread
    stack_bytes: int  # local (NVIDIA) / private segment (AMD) bytes per thread
    shared_bytes: int  # per CTA: Triton's dynamic allocation plus the static declaration
    threads: int  # per CTA
    ctas_per_unit: int  # co-resident CTAs per SM/CU


def _cuobjdump() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def nvidia_resources(cubin: bytes, dynamic_shared: int, threads: int, target: Target) -> Resources:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(_cuobjdump()), "--dump-resource-usage", f.name], check=True,
                             capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", out))
    regs, stack = int(fields["REG"]), int(fields["STACK"])
    local = int(fields["LOCAL"])
    shared = dynamic_shared + int(fields["SHARED"])
    return Resources(regs, local, stack + local, shared, threads, nvidia_ctas_per_sm(regs, shared, threads, target))


def nvidia_ctas_per_sm(regs: int, shared: int, threads: int, target: Target) -> int:
    """Hopper's occupancy rule: threads, CTA slots, registers (per-warp granule 256), shared memory."""
    warps = -(-threads // 32)
    regs_per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = (target.regs_per_unit // regs_per_warp) // warps
    by_shared = target.shared_per_unit // (shared + target.shared_reserved_per_cta)
    return max(0, min(target.max_threads_per_unit // threads, target.max_ctas_per_unit, by_regs, by_shared))


def _meta(text: str, key: str) -> int:
    m = re.search(rf"^\s*\.{re.escape(key)}:\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def amd_resources(amdgcn: str, dynamic_shared: int, threads: int, target: Target) -> Resources:
    vgpr = _meta(amdgcn, "vgpr_count")
    agpr = _meta(amdgcn, "agpr_count")
    spills = _meta(amdgcn, "vgpr_spill_count") * 4  # SGPR spills land in VGPR lanes, not memory
    private = _meta(amdgcn, "private_segment_fixed_size")
    lds = max(dynamic_shared, _meta(amdgcn, "group_segment_fixed_size"))
    # VGPRs and AGPRs share a 512-entry file per SIMD lane, allocated in granules of 8.
    regs = -(-(vgpr + agpr) // 8) * 8 if agpr else vgpr
    waves_per_simd = min(target.max_waves_per_simd, target.regs_per_unit // max(regs, 8))
    waves_per_cta = -(-threads // target.warp_size)
    by_waves = waves_per_simd * target.simds_per_unit // waves_per_cta
    by_lds = target.shared_per_unit // lds if lds else target.max_ctas_per_unit
    ctas = max(0, min(by_waves, by_lds, target.max_ctas_per_unit))
    return Resources(vgpr + agpr, spills, private, lds, threads, ctas)
