"""The device memory a bound package holds on top of the engine's own weights and KV cache, from
its manifest alone (standard library: ``monobuild inspect`` reports it on a machine without
torch). ``runtime/buffers.py`` allocates exactly these buffers; a test holds the two to each other.

Per mode, each band's step buffers (``StepBuffers`` and the band's padded input copies), one RoPE
table the bands share, and the weights that binding copies: q/k/v and gate/up, which the programs
read as one tensor each, are concatenated (Qwen2's q/k/v biases and an FP8 checkpoint's block
scales with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import Manifest
from .schema import Band

ELEMENT_BYTES = {"fp8e4nv": 1, "bf16": 2, "fp32": 4, "i32": 4, "i64": 8}
HANG_RECORD = 4  # int64 a debug build's hang log keeps per record (after one count)
SAMPLING_BYTES = 4 + 4 + 4 + 8  # a sampling head's per-row settings: temperature, top-k, top-p, seed


@dataclass(frozen=True)
class BandFootprint:
    band: Band
    scratch: int  # the scratch regions (each the largest any of the band's programs declares)
    activations: int  # the two fp32 hidden-state buffers the launches ping-pong between
    outputs: int  # logits, next ids, a verify band's verdict
    control: int  # sync counters, a debug build's hang log, a profiling build's clocks
    inputs: int  # the band's own padded copies of the step inputs

    @property
    def total(self) -> int:
        return self.scratch + self.activations + self.outputs + self.control + self.inputs


@dataclass(frozen=True)
class Footprint:
    mode: str
    bands: tuple[BandFootprint, ...]
    rope: int  # the RoPE table, shared by the bands
    weight_copies: int  # what binding copies of the engine's weights (concatenated projections)

    @property
    def step_buffers(self) -> int:
        return sum(b.total for b in self.bands) + self.rope

    @property
    def total(self) -> int:
        return self.step_buffers + self.weight_copies


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def band_footprint(manifest: Manifest, step) -> BandFootprint:
    """The buffers ``runtime.step`` allocates for one band's step (``schema.Step``)."""
    g, d = manifest.geometry, manifest.deployment
    programs = {p.name: p for p in manifest.programs}
    used = [programs[n] for n in sorted({launch.program for launch in step.launches})]
    regions = [r for p in used for r in p.regions]
    scratch: dict[str, int] = {}
    for r in regions:
        if r.kind == "scratch":
            scratch[r.name] = max(scratch.get(r.name, 0), _numel(r.shape) * ELEMENT_BYTES[r.dtype])
    m, rows = step.band.m, step.band.rows
    act_shape = next((tuple(r.shape) for r in regions if r.name == "x_in"), (1, m, g.hidden))
    verdict = {r.name: _numel(r.shape) * ELEMENT_BYTES[r.dtype] for r in regions
               if r.kind == "io" and r.name in ("accepted", "emitted")}
    counters = max(p.counters for p in used)
    hang = max(p.hang_slots for p in used)
    clocked = [p for p in used if p.clock_slots]
    clock = (max(p.grid for p in clocked) * max(p.clock_slots for p in clocked)) if clocked else 0
    launches = len(step.launches)
    blocks = -(-d.max_context // d.kv_cache.block_size)
    return BandFootprint(
        band=step.band, scratch=sum(scratch.values()), activations=2 * _numel(act_shape) * 4,
        outputs=m * g.vocab * 4 + m * 4 + sum(verdict.values()),
        control=(launches * max(counters, 1) + 1 + HANG_RECORD * hang + launches * clock) * 8,
        inputs=(2 * m + rows * blocks + rows) * 4 + (rows * SAMPLING_BYTES if d.head == "sample" else 0))


def weight_copies(manifest: Manifest) -> int:
    """Bytes of the weights binding concatenates: per layer q/k/v and gate/up (and their biases or
    block scales)."""
    g, d = manifest.geometry, manifest.deployment
    projection = ELEMENT_BYTES[d.dtypes.projection]
    rows = g.qkv_rows + 2 * g.intermediate  # the two concatenated projections' rows
    per_layer = rows * g.hidden * projection
    if g.qkv_bias:  # Qwen2's q/k/v biases, concatenated like their weights
        per_layer += g.qkv_rows * ELEMENT_BYTES[d.dtypes.weights]
    if d.quant is not None:
        q = d.quant
        per_layer += sum(q.scale_shape(r, g.hidden)[0] for r in (g.q_heads * g.head_dim, g.kv_heads * g.head_dim,
                                                                g.kv_heads * g.head_dim, g.intermediate,
                                                                g.intermediate)) * q.scale_shape(1, g.hidden)[1] * 4
    return g.layers * per_layer


def footprint(manifest: Manifest, mode: str) -> Footprint:
    """What binding the package in ``mode`` allocates on the device, beyond the engine's tensors."""
    steps = sorted((s for s in manifest.steps if s.mode == mode), key=lambda s: (s.band.tokens, s.band.rows))
    rope = manifest.deployment.max_context * manifest.geometry.head_dim * 4  # [cos | sin] of head_dim / 2 each
    return Footprint(mode, tuple(band_footprint(manifest, s) for s in steps), rope, weight_copies(manifest))
