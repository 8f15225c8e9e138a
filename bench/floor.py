"""The stage-synchronous floor of a package's step (``monobuild bench --floor``).

The roofline says how fast a step's bytes can move; the floor says how fast they can move through
the step's structure. For each launch of the step it runs the floor program
(``compiler/kernels/floor.py``) with the launch's grid, CTAs per SM, warps, PDL and cooperative
attributes, one stage per real stage with the same sync edges between them, and each stage's
bytes as the planner counts them for the roofline (weights, the KV at the bench's context, the
activations in and out). It moves nothing else and computes nothing; the real programs, whose
stages also start loading after their waits, have not beaten it (``compiler/kernels/floor.py``
says when one could). Four variants:

- ``per_layer``: the step's own launches (the embedding, one program per decoder layer, the head);
- ``one_launch``: the decoder layers and the head in one persistent launch, the launch boundary
  between layers replaced by a sync edge (the embedding stays its own launch): what a program
  spanning every layer could at best reach with the same stages;
- ``streaming``: ``per_layer``'s launches, stages and edges, each CTA's copies running ahead of its
  waits across stage boundaries (and, with PDL, of the launch's ``griddepcontrol.wait``), the
  edges ordering only their use: what the same stages could at best reach if every stage's
  weights (and the cached KV) streamed while the CTA waited — a program the layer program's
  Triton cannot express (Gluon can; ``floor_streaming_kernel``);
- ``streaming_one_launch``: both, ``one_launch``'s launch run by the streaming program.

The streaming program's copies are NVIDIA's (``cp.async``), so on an AMD target only the first
two variants run (``target_variants``).

Each stage's bytes are rounded up to whole 16 KB chunks (at most 16 KB a stage; the floor's
own byte count is reported). The floor programs are compiled on the machine that runs the bench,
so ``--floor`` needs the compiler (Triton) there; the decode step itself never does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..manifest import Manifest
from ..schema import Arg, Band
from .roofline import stage_bytes

CHUNK_INTS = 4096  # int32 a CTA loads per pipeline stage: 16 KB, 8 × 16-byte vectors a thread at 4 warps
CHUNK_BYTES = 4 * CHUNK_INTS
# Pipeline depths tried; the floor is the faster. The layer programs keep 2–3 chunks of 16 KB in
# flight a CTA; deeper must not be what makes the floor fast or slow. The streaming floor also
# tries a ring of 8 (112 KB ahead of a wait), where it fits beside the launch's other CTAs.
DEPTHS = (4, 6)
STREAMING_DEPTHS = (4, 6, 8)
SHARED_PER_SM = 227 * 1024  # shared memory the CTAs on one H100/H200 SM may have together (about)
VARIANTS = ("per_layer", "one_launch", "streaming", "streaming_one_launch")
KERNELS = {"per_layer": "floor_kernel", "one_launch": "floor_kernel", "streaming": "floor_streaming_kernel",
           "streaming_one_launch": "floor_streaming_kernel"}


@dataclass(frozen=True)
class FloorLaunch:
    """One launch of the floor: the real program it stands for and what it moves, stage by stage."""

    variant: str
    program: str
    grid: int
    ctas_per_sm: int
    num_warps: int
    pdl: bool
    cooperative: bool
    stage_chunks: tuple[int, ...]  # CHUNK_BYTES chunks each stage streams

    @property
    def nbytes(self) -> int:
        return sum(self.stage_chunks) * CHUNK_BYTES


def _chunks(nbytes: int) -> int:
    return -(-nbytes // CHUNK_BYTES)


def target_variants(target: str) -> tuple[str, ...]:
    """The variants a target's floor has: the streaming program is written for NVIDIA GPUs."""
    from ..compiler.targets import TARGETS

    nvidia = TARGETS[target].is_nvidia
    return tuple(v for v in VARIANTS if nvidia or KERNELS[v] != "floor_streaming_kernel")


def variant_depths(variant: str) -> tuple[int, ...]:
    """The pipeline depths (ring slots, for the streaming program) a variant is timed at."""
    return STREAMING_DEPTHS if KERNELS[variant] == "floor_streaming_kernel" else DEPTHS


def launch_depth(launch: FloorLaunch, depth: int) -> int:
    """``depth``, or for the streaming program the deepest ring up to it that fits the launch's
    CTAs per SM in shared memory (a ring slot is a chunk)."""
    if KERNELS[launch.variant] != "floor_streaming_kernel":
        return depth
    return max(2, min(depth, SHARED_PER_SM // (launch.ctas_per_sm * CHUNK_BYTES) - 1))


def floor_launches(manifest: Manifest, band: Band, context: int, variant: str,
                   mode: str = "persistent", selected: dict[int, int] | None = None) -> tuple[FloorLaunch, ...]:
    """The floor's launches for a band's step at ``context`` tokens a row (see the module
    docstring); a routed layer's for the experts its rows ``selected`` (``roofline.stage_bytes``)."""
    if variant not in VARIANTS:
        raise ValueError(f"floor variant {variant!r}: one of {', '.join(VARIANTS)}")
    step = next(s for s in manifest.steps if s.band == band and s.mode == mode)
    launches = []
    for launch in step.launches:
        p = manifest.program(launch.program)
        chunks = tuple(_chunks(stage_bytes(manifest.geometry, s, launch, band, context, selected)) for s in p.stages)
        launches.append(FloorLaunch(variant, p.name, p.grid, -(-p.grid // manifest.sm_count), p.block // 32, p.launch_pdl,
                                    p.launch_cooperative, chunks))
    if variant in ("one_launch", "streaming_one_launch"):
        first_layer = next(i for i, x in enumerate(step.launches) if x.layer is not None)
        layer = launches[first_layer]
        fused = FloorLaunch(variant, "every layer and the head", layer.grid, layer.ctas_per_sm, layer.num_warps, False,
                            True, tuple(c for x in launches[first_layer:] for c in x.stage_chunks))
        launches = launches[:first_layer] + [fused]
    return tuple(launches)


@dataclass(frozen=True)
class FloorTiming:
    variant: str
    nbytes: int
    depth: int  # the pipeline depth that gave this (the fastest of variant_depths; a streaming launch's ring may
    # be shallower where it does not fit, launch_depth)
    median_ms: float
    p90_ms: float


def floor_source(launches: tuple[FloorLaunch, ...]):
    """The bytes a floor step reads, on the current CUDA device: ones, so that after a run every
    CTA's sink sums to the int32 it read (``FloorStep.verify`` checks it). Every variant and depth
    of a band's floor reads the same chunks, so one buffer serves them all."""
    import torch

    return torch.ones(sum(sum(x.stage_chunks) for x in launches) * CHUNK_INTS, dtype=torch.int32, device="cuda")


class FloorStep:
    """The floor's launches bound to a source buffer (``floor_source``) on the current CUDA device,
    callable as a step (capturable in a CUDA graph)."""

    def __init__(self, launches: tuple[FloorLaunch, ...], target: str, depth: int, kernels: dict, src):
        import torch

        from ..runtime.cuda import CudaKernel
        from ..runtime.params import ParamBlock

        self.launches = launches
        if src.numel() < sum(sum(x.stage_chunks) for x in launches) * CHUNK_INTS:
            raise ValueError("floor source buffer smaller than the launches' chunks")
        self._bound = []
        first = 0
        for x in launches:
            d = launch_depth(x, depth)
            key = (KERNELS[x.variant], x.grid, x.ctas_per_sm, x.num_warps, x.pdl, x.cooperative, d)
            if key not in kernels:
                code = compile_floor(x, target, d)
                kernel = CudaKernel(code.binary, code.symbol, x.grid, x.num_warps * 32, code.shared_bytes, x.pdl,
                                    x.cooperative)
                if x.cooperative:
                    kernel.pin_ctas_per_sm(x.ctas_per_sm)  # as the runtime pins the real program
                kernels[key] = kernel
            stage_chunks = torch.tensor(x.stage_chunks, dtype=torch.int64, device="cuda")
            counters = torch.zeros(max(1, len(x.stage_chunks) - 1), dtype=torch.int64, device="cuda")
            sink = torch.zeros(x.grid * CHUNK_INTS, dtype=torch.int32, device="cuda")
            params = ParamBlock(["*i32", "*i64", "*i64", "*i32", "i32"],
                                [src.data_ptr() + first * CHUNK_BYTES, stage_chunks.data_ptr(), counters.data_ptr(),
                                 sink.data_ptr(), len(x.stage_chunks)])
            self._bound.append((kernels[key], params, stage_chunks, counters, sink))
            first += sum(x.stage_chunks)

    def __call__(self) -> None:
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        for kernel, params, *_ in self._bound:
            kernel.launch(stream, params.address)

    def verify(self) -> None:
        """After a run: every launch's CTAs read exactly its chunks (the source is all ones)."""
        import torch

        for x, (_, _, _, _, sink) in zip(self.launches, self._bound):
            read = int(sink.sum(dtype=torch.int64).item())
            if read != sum(x.stage_chunks) * CHUNK_INTS:
                raise RuntimeError(f"floor launch for {x.program}: read {read} int32, expected "
                                   f"{sum(x.stage_chunks) * CHUNK_INTS}")


@dataclass(frozen=True)
class FloorProgram:
    """A floor launch shape as the toolchain compiles it: a hand-written kernel and its constants."""

    name: str
    kernel_name: str
    args: tuple[Arg, ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    launch_pdl: bool
    launch_cooperative: bool
    grid: int
    max_registers: int | None = None  # the compiler's choice, as for a layer program alone on its SM

    def kernel(self):
        from ..compiler import kernels

        return getattr(kernels, self.kernel_name)


def floor_program(launch: FloorLaunch, depth: int) -> FloorProgram:
    """The toolchain's input for one floor launch shape."""
    consts = {"CHUNK": CHUNK_INTS, "G": launch.grid, "PDL": launch.pdl, "W_STAGES": depth}
    args = (Arg("src", "*i32", "scratch"), Arg("stage_chunks", "*i64", "scratch"), Arg("counters", "*i64", "sync"),
            Arg("sink", "*i32", "scratch"), Arg("S", "i32", "step_input"))
    kernel = KERNELS[launch.variant]
    return FloorProgram(f"floor.{kernel}.g{launch.grid}.d{depth}", kernel, args, tuple(sorted(consts.items())),
                        launch.num_warps, launch.pdl, launch.cooperative, launch.grid)


def compile_floor(launch: FloorLaunch, target: str, depth: int):
    from ..compiler.targets import TARGETS
    from ..compiler.toolchain import compile_program

    return compile_program(floor_program(launch, depth), TARGETS[target])
