"""The targets monobuild compiles for, and what bounds a CTA's residency on each.

Numbers are the architectures' documented per-SM/CU limits; the SM/CU count itself comes from
the recipe (a part may ship with fewer units enabled). ``monobuild check`` (C3) and the planner's
grid size both read these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # recipe spelling: sm_90, gfx942, gfx950
    backend: str  # triton backend: cuda | hip
    arch: int | str  # GPUTarget arch
    warp_size: int
    code_suffix: str  # cubin | hsaco
    max_threads_per_unit: int
    max_ctas_per_unit: int
    regs_per_unit: int  # 32-bit registers per SM; per SIMD lane budget on AMD (see occupancy)
    shared_per_unit: int  # bytes of shared memory / LDS per SM or CU usable by CTAs
    shared_reserved_per_cta: int  # bytes the hardware reserves per resident CTA
    max_waves_per_simd: int = 0  # AMD only
    simds_per_unit: int = 0  # AMD only

    @property
    def is_nvidia(self) -> bool:
        return self.backend == "cuda"

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


TARGETS: dict[str, Target] = {
    "sm_90": Target(
        name="sm_90", backend="cuda", arch=90, warp_size=32, code_suffix="cubin",
        max_threads_per_unit=2048, max_ctas_per_unit=32, regs_per_unit=65536,
        shared_per_unit=233472, shared_reserved_per_cta=1024,
    ),
    "gfx942": Target(
        name="gfx942", backend="hip", arch="gfx942", warp_size=64, code_suffix="hsaco",
        max_threads_per_unit=2048, max_ctas_per_unit=32, regs_per_unit=512,
        shared_per_unit=65536, shared_reserved_per_cta=0, max_waves_per_simd=8, simds_per_unit=4,
    ),
    "gfx950": Target(
        name="gfx950", backend="hip", arch="gfx950", warp_size=64, code_suffix="hsaco",
        max_threads_per_unit=2048, max_ctas_per_unit=32, regs_per_unit=512,
        shared_per_unit=163840, shared_reserved_per_cta=0, max_waves_per_simd=8, simds_per_unit=4,
    ),
}
