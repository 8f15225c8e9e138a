"""``monobuild bench``: a package's decode step against the roofline and a PyTorch baseline, in one run.

For each band (and context): the step captured in a CUDA graph, each replay timed with CUDA
events; the roofline is the bytes the step must move (manifest) ÷ the device-to-device copy
bandwidth measured at the start of the same run; the baseline is the same step in plain PyTorch
(``baseline.py``), torch.compile'd and captured in a CUDA graph, timed the same way. Weights and
KV cache hold random values (never zeros), and the KV pages of each row are scattered. A routed
model's roofline counts the experts the timed step's rows chose, layer by layer (the step's own
record); the row reports how many that was, on average over the routed layers.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from .. import runtime
from .baseline import TorchDecodeStep
from .cases import blocks_needed, random_case, random_kv_cache, random_state_dict
from .floor import FloorStep, FloorTiming, floor_launches, floor_source, target_variants, variant_depths
from .roofline import step_bytes


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p90_ms: float


@dataclass(frozen=True)
class BenchRow:
    band: str
    mode: str
    context: int
    bytes: int
    roofline_ms: float
    ours: Timing
    baseline: Timing | None
    baseline_rel_diff: float | None  # ‖baseline − ours‖ / ‖ours‖ on the bench's inputs
    floors: tuple[FloorTiming, ...] = ()  # ``--floor``: the stage-synchronous floor's variants (floor.py)
    experts: float | None = None  # a routed model's distinct experts a routed layer's rows chose, mean over layers

    def floor(self, variant: str) -> FloorTiming | None:
        return next((f for f in self.floors if f.variant == variant), None)

    @property
    def gbps(self) -> float:
        return self.bytes / self.ours.median_ms / 1e6

    @property
    def roofline_pct(self) -> float:
        return 100 * self.roofline_ms / self.ours.median_ms

    @property
    def speedup(self) -> float | None:
        return self.baseline.median_ms / self.ours.median_ms if self.baseline else None


@dataclass(frozen=True)
class BenchResult:
    package: str
    device: str
    copy_gbps: float
    rows: tuple[BenchRow, ...]

    def vs_one_row(self, row: BenchRow) -> float | None:
        """The row's median over the 1-row step's (band r1t1) at the same context and mode, from
        this run: the ratio issue 5's batch and verify-width targets are stated in. None when the
        run has no such step."""
        one = next((r for r in self.rows if r.band == "r1t1" and (r.context, r.mode) == (row.context, row.mode)), None)
        return row.ours.median_ms / one.ours.median_ms if one else None

    def to_json(self) -> dict:
        doc = asdict(self)
        for row, out in zip(self.rows, doc["rows"]):
            out |= {"gbps": row.gbps, "roofline_pct": row.roofline_pct, "speedup": row.speedup,
                    "vs_one_row": self.vs_one_row(row)}
        return doc


def copy_bandwidth(nbytes: int = 2 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in B/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    times = time_replays(lambda: dst.copy_(src), iters, graph=False)
    return 2 * nbytes / (statistics.median(times) / 1e3)


def time_replays(fn: Callable[[], object], iters: int, graph: bool = True, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``iters`` runs of ``fn`` (captured in a CUDA graph when ``graph``)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    run = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
        for _ in range(warmup):
            run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _timing(times: list[float]) -> Timing:
    ordered = sorted(times)
    return Timing(statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))])


def bench(package_dir, contexts: tuple[int, ...] = (1024,), modes: tuple[str, ...] | None = None,
          bands: tuple[str, ...] | None = None, iters: int = 200, baseline: bool = True,
          progress: Callable[[str], None] = lambda _: None, pin_occupancy: bool = True,
          pdl: bool = True, floor: bool = False) -> BenchResult:
    """Time every (context, band, mode) case; ``pin_occupancy`` and ``pdl`` off are ablations
    (see ``runtime.load``). With ``floor``, each persistent case also times the stage-synchronous
    floor of its step (``floor.py``; compiled here, so it needs Triton on this machine)."""
    pkg = runtime.load(package_dir, pin_occupancy=pin_occupancy, pdl=pdl)
    progress(f"loaded {package_dir} on {torch.cuda.get_device_name(pkg.device)}")
    copy = copy_bandwidth()
    progress(f"device-to-device copy: {copy / 1e9:.0f} GB/s")
    weights = pkg.bind_weights(random_state_dict(pkg, seed=0))
    specs = sorted({s.band for s in pkg.manifest.steps}, key=lambda b: (b.tokens, b.rows))
    rows_out = []
    floor_kernels: dict = {}  # compiled floor programs by launch shape, shared by every case
    for context in contexts:
        for band in specs:
            if bands and band.name not in bands:
                continue
            blocks = blocks_needed(pkg, band.rows, context)
            cache = random_kv_cache(pkg, blocks, seed=context)
            case = random_case(pkg, [context] * band.rows, band.tokens, blocks, seed=context)
            i = case.inputs
            base_timing = diff = None
            ours_logits = None
            for mode in modes or pkg.modes:
                step = pkg.bind(weights, cache, mode)
                args = (i.tokens, i.positions, i.block_tables, i.context_lens)
                timing = _timing(time_replays(lambda step=step, args=args, s=i.sampling: step(*args, sampling=s), iters))
                if ours_logits is None:
                    ours_logits = step.logits.clone()
                selected = {layer: int(record[0]) for layer, record in step.routed.items()}  # the timed step's
                nbytes = step_bytes(pkg.manifest, band, context, mode, selected or None)
                experts = sum(selected.values()) / len(selected) if selected else None
                if baseline and base_timing is None:
                    base_timing, diff = _baseline(pkg, weights, cache, i, context, ours_logits, iters)
                floors = ()
                if floor and mode == "persistent":
                    floors = _floors(pkg.manifest, band, context, iters, floor_kernels, progress, selected or None)
                row = BenchRow(band.name, mode, context, nbytes, nbytes / copy * 1e3, timing, base_timing, diff, floors,
                               experts)
                rows_out.append(row)
                progress(f"{band.name} ctx {context} {mode}: {timing.median_ms:.3f} ms "
                         f"({row.roofline_pct:.0f}% of roofline)")
            del cache
            torch.cuda.empty_cache()
    return BenchResult(str(package_dir), torch.cuda.get_device_name(pkg.device), copy, tuple(rows_out))


def _floors(manifest, band, context, iters, kernels, progress, selected=None) -> tuple[FloorTiming, ...]:
    """Each floor variant of the band's persistent step (a routed layer's for the experts its
    rows ``selected``), at the faster of the pipeline depths tried."""
    out = []
    src = None  # the step's bytes, up to ~15 GB: allocated once for every variant and depth
    for variant in target_variants(manifest.target):
        launches = floor_launches(manifest, band, context, variant, selected=selected)
        src = src if src is not None else floor_source(launches)
        best = None
        for depth in variant_depths(variant):
            floor_step = FloorStep(launches, manifest.target, depth, kernels, src)
            timing = _timing(time_replays(floor_step, iters))
            floor_step.verify()
            del floor_step
            if best is None or timing.median_ms < best.median_ms:
                best = FloorTiming(variant, sum(x.nbytes for x in launches), depth, timing.median_ms, timing.p90_ms)
        progress(f"{band.name} ctx {context} floor, {variant}: {best.median_ms:.3f} ms (depth {best.depth})")
        out.append(best)
    del src
    torch.cuda.empty_cache()
    return tuple(out)


def _baseline(pkg, weights, cache, inputs, context, ours_logits, iters) -> tuple[Timing, float]:
    torch_step = TorchDecodeStep(pkg.geometry, weights, cache.k, cache.v, pkg.manifest.deployment.max_context,
                                 pkg.device)
    compiled = torch.compile(torch_step, dynamic=False)
    args = (inputs.tokens, inputs.positions, inputs.block_tables, inputs.context_lens)
    out = {}

    def run():
        out["logits"] = compiled(*args)

    times = time_replays(run, iters)
    diff = ((out["logits"] - ours_logits).norm() / ours_logits.norm()).item()
    return _timing(times), diff
