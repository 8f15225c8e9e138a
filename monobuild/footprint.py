"""The device memory a bound package holds on top of the engine's own weights and KV cache, from
its manifest alone (standard library: ``monobuild inspect`` reports it on a machine without
torch). ``runtime/buffers.py`` allocates exactly these buffers; a test holds the two to each other.

Per mode, each band's step buffers (``StepBuffers`` and the band's padded input copies) and one
RoPE table the bands share. The weights are not among them: the programs read the engine's own
tensors where they are (``runtime/weights.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import Manifest
from .parallel import SITES, SLOTS, TensorParallel
from .schema import Band, Region, Step, takes_draft_probs

HANG_RECORD = 4  # int64 a debug build's hang log keeps per record (after one count)
SAMPLING_BYTES = 4 + 4 + 4 + 8  # a sampling head's per-row settings: temperature, top-k, top-p, seed
VERDICT = ("accepted", "emitted")  # a verify band's greedy verdict, io regions of the head
ROUTED = "routed"  # a routed layer's record of the experts its rows chose, an io region of one per layer


@dataclass(frozen=True)
class StepLayout:
    """What a band's step buffers are made of, from the programs its launches run: the one
    description both ``runtime/buffers.py`` (which allocates them) and the report read."""

    regions: tuple[Region, ...]
    launches: int
    counters: int  # sync counters a launch uses, the most of any program
    hang_slots: int
    clock_shape: tuple[int, int]  # a profiling build's (CTAs, slots) per launch; (0, 0) otherwise

    @property
    def scratch(self) -> dict[str, Region]:
        """Each scratch region once, the largest any program declares under its name."""
        out: dict[str, Region] = {}
        for r in self.regions:
            if r.kind == "scratch" and (r.name not in out or r.nbytes > out[r.name].nbytes):
                out[r.name] = r
        return out

    @property
    def verdict(self) -> tuple[Region, ...]:
        """A verify band's verdict regions, each once."""
        return tuple({r.name: r for r in self.regions if r.kind == "io" and r.name in VERDICT}.values())

    @property
    def routed(self) -> tuple[int, ...]:
        """A routed layer's record of the experts its rows chose ([1 + slots] i32: how many, then
        which), one per decoder layer; () where no program routes."""
        shapes = [tuple(r.shape) for r in self.regions if r.kind == "io" and r.name == ROUTED]
        return max(shapes) if shapes else ()

    def logits_shape(self, m: int, vocab: int) -> tuple[int, ...]:
        """The head's logits, as declared ([m, vocab]: under tensor parallelism one rank's rows,
        or the whole vocabulary where a logits head gathers them)."""
        return next((tuple(r.shape) for r in self.regions if r.kind == "io" and r.name == "logits"), (m, vocab))

    def act_shape(self, m: int, hidden: int) -> tuple[int, ...]:
        """The hidden state between programs: [split-K partials, m, hidden], as the layers' x_in says."""
        return next((tuple(r.shape) for r in self.regions if r.name == "x_in"), (1, m, hidden))


def step_layout(manifest: Manifest, step: Step) -> StepLayout:
    programs = {p.name: p for p in manifest.programs}
    used = [programs[n] for n in sorted({launch.program for launch in step.launches})]
    clocked = [p for p in used if p.clock_slots]
    clock = (max(p.grid for p in clocked), max(p.clock_slots for p in clocked)) if clocked else (0, 0)
    return StepLayout(tuple(r for p in used for r in p.regions), len(step.launches), max(p.counters for p in used),
                      max(p.hang_slots for p in used), clock)


@dataclass(frozen=True)
class BandFootprint:
    band: Band
    scratch: int  # the scratch regions (each the largest any of the band's programs declares)
    activations: int  # the two fp32 hidden-state buffers the launches ping-pong between
    outputs: int  # logits, next ids, a verify band's verdict, the routed layers' records
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

    @property
    def total(self) -> int:
        return sum(b.total for b in self.bands) + self.rope


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def band_footprint(manifest: Manifest, step: Step) -> BandFootprint:
    """The buffers ``runtime.step`` allocates for one band's step."""
    d = manifest.deployment
    g = TensorParallel(d.tensor_parallel).rank_geometry(manifest.geometry)
    layout = step_layout(manifest, step)
    m, rows = step.band.m, step.band.rows
    blocks = -(-d.max_context // d.kv_cache.block_size)
    clock = _numel(layout.clock_shape) if layout.clock_shape[0] else 0
    return BandFootprint(
        band=step.band, scratch=sum(r.nbytes for r in layout.scratch.values()),
        activations=2 * _numel(layout.act_shape(m, g.hidden)) * 4,
        outputs=_numel(layout.logits_shape(m, g.vocab)) * 4 + m * 4 + sum(r.nbytes for r in layout.verdict)
        + (g.layers * _numel(layout.routed) * 4 if layout.routed else 0),
        control=(layout.launches * (max(layout.counters, 1) + clock) + 1 + HANG_RECORD * layout.hang_slots
                 + (SITES * SLOTS if d.tensor_parallel > 1 else 0)) * 8,
        inputs=(2 * m + rows * blocks + rows) * 4 + (rows * SAMPLING_BYTES if d.head == "sample" else 0)
        + ((m - rows) * manifest.geometry.vocab * 4 if takes_draft_probs(d, step.band) else 0))  # the whole vocabulary's



def footprint(manifest: Manifest, mode: str) -> Footprint:
    """What binding the package in ``mode`` allocates on the device, beyond the engine's tensors."""
    steps = sorted((s for s in manifest.steps if s.mode == mode), key=lambda s: (s.band.tokens, s.band.rows))
    rope = manifest.deployment.max_context * manifest.geometry.head_dim * 4  # [cos | sin] of head_dim / 2 each
    return Footprint(mode, tuple(band_footprint(manifest, s) for s in steps), rope)
