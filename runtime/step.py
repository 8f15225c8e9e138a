"""The decode step: a package's launches over bound weights, KV cache and preallocated buffers.

Everything a launch reads is fixed at bind time except the step's inputs, so each launch site
gets its parameter block once and a step only rewrites the input slots that changed, then issues
one driver call per launch on the caller's current stream. The step allocates nothing and never
waits for the host, so a CUDA graph can capture it.

The band is the smallest one with at least the caller's rows and the same tokens per row. When
the caller's inputs already are the band's shape (int32, contiguous, aligned, on the device),
the programs read them in place; otherwise they are copied into the band's own input buffers,
padded with dead rows (context length 0), which store nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from ..footprint import ROUTED
from ..parallel import TensorParallel
from ..schema import Step, takes_draft_probs
from .buffers import RankBinding, Sampling, StepBuffers, StepInputs, band_buffers, input_copies
from .gate import step_refusal
from .hangs import check_group_hang_logs, check_hang_log, check_ranks_hang_logs
from .kvcache import KVCache
from .params import ParamBlock
from .rope import rope_table
from .tma import descriptor, stacked_rows, token_rows
from .weights import ALIGNMENT, PackedWeights


class StepInputError(ValueError):
    """Step inputs the package cannot serve: says which argument and why."""


@dataclass(frozen=True)
class _Launch:
    name: str
    kernel: object
    params: ParamBlock
    input_slots: tuple[tuple[int, str], ...]  # (parameter index, input argument)


def _address(value) -> int:
    return value.data_ptr() if isinstance(value, torch.Tensor) else int(value)


def _param(program, arg, value):
    """A launch's value for ``arg``: a TMA descriptor over the tensor for a streamed weight or KV
    cache (the box and swizzle the code was built with; a cache seen as its token rows, a routed
    layer's expert stack as its stacked rows), its address or the integer otherwise."""
    if arg.type.startswith("tensordesc"):
        if arg.role == "kv_cache":
            value = token_rows(value)
        elif value.dim() == 3:
            value = stacked_rows(value)
        return descriptor(value, program.tensor_map(arg.name))
    return _address(value)


def _input_values(inputs: StepInputs) -> dict[str, int]:
    values = {"tokens": inputs.tokens.data_ptr(), "positions": inputs.positions.data_ptr(),
              "block_tables": inputs.block_tables.data_ptr(), "context_lens": inputs.context_lens.data_ptr(),
              "bt_stride": inputs.block_tables.stride(0)}
    if inputs.sampling is not None:
        values.update({name: getattr(inputs.sampling, name).data_ptr() for name in Sampling.DTYPES})
        if inputs.sampling.draft_probs is not None:
            values["draft_probs"] = inputs.sampling.draft_probs.data_ptr()
    return values


class _BandStep:
    """One band's launches, buffers and input buffers."""

    def __init__(self, package, spec: Step, weights: PackedWeights, cache: KVCache, rope: torch.Tensor,
                 buffers: StepBuffers | None = None):
        manifest, device = package.manifest, package.device
        deployment = manifest.deployment
        self.band, self.spec = spec.band, spec
        programs = {p.name: p for p in manifest.programs}
        self.buffers = buffers if buffers is not None else band_buffers(manifest, spec, device, rope)
        self.max_blocks = -(-deployment.max_context // deployment.kv_cache.block_size)
        self.drafts = (self.band.tokens - 1, package.geometry.vocab) if takes_draft_probs(deployment, self.band) else None
        self.own = input_copies(self.band.m, self.band.rows, self.max_blocks, device, deployment.head == "sample",
                                self.drafts)
        self.launches = []
        # the layers whose launches record their rows' chosen experts (a routed layer's)
        self.routed_layers = sorted({launch.layer for launch in spec.launches
                                     if any(r.name == ROUTED for r in programs[launch.program].regions)})
        for index, launch in enumerate(spec.launches):
            p = programs[launch.program]
            values = self.buffers.args(p.args, index, launch.layer, p.kind, weights, cache.k, cache.v, self.own,
                                       p.scalars)
            params = ParamBlock([a.type for a in p.args], [_param(p, a, v) for a, v in zip(p.args, values)])
            slots = tuple((j, a.name) for j, a in enumerate(p.args) if a.role == "step_input")
            self.launches.append(_Launch(p.name, package.kernels[p.name], params, slots))
        self._bound = _input_values(self.own)

    def prepare(self, tokens, positions, block_tables, context_lens, device, sampling: Sampling | None = None
                ) -> StepInputs:
        """The inputs the programs read: the caller's tensors in place, or copies padded to the band."""
        rows = context_lens.shape[0]
        given = StepInputs(tokens, positions, block_tables, context_lens, sampling)
        settings = [(getattr(sampling, n), t) for n, t in Sampling.DTYPES.items()] if sampling is not None else []
        if self.drafts is not None:
            settings.append((sampling.draft_probs, torch.float32))
        in_place = rows == self.band.rows and all(
            t.dtype == dtype and t.stride(-1) == 1 and t.data_ptr() % ALIGNMENT == 0
            for t, dtype in [(t, torch.int32) for t in (tokens, positions, block_tables, context_lens)] + settings)
        if in_place:
            return given
        if block_tables.shape[1] > self.max_blocks:
            raise StepInputError(f"block_tables: {block_tables.shape[1]} blocks per row; the package's max_context "
                                 f"allows {self.max_blocks}")
        m = tokens.shape[0]
        own = self.own
        own.tokens[:m].copy_(tokens, non_blocking=True)
        own.positions[:m].copy_(positions, non_blocking=True)
        own.block_tables[:rows, : block_tables.shape[1]].copy_(block_tables, non_blocking=True)
        own.context_lens[:rows].copy_(context_lens, non_blocking=True)
        if sampling is not None:
            for name in Sampling.DTYPES:
                getattr(own.sampling, name)[:rows].copy_(getattr(sampling, name), non_blocking=True)
            if self.drafts is not None:
                own.sampling.draft_probs[:rows].copy_(sampling.draft_probs, non_blocking=True)
        if rows < self.band.rows:  # padding rows: context 0 (dead), token 0 (a valid id), greedy
            own.context_lens[rows:].zero_()
            own.tokens[m:].zero_()
            own.positions[m:].zero_()
            if own.sampling is not None:
                own.sampling.temperature[rows:].zero_()
        return own

    def run(self, inputs: StepInputs, stream: int) -> None:
        self.take(inputs)
        for launch in self.launches:
            launch.kernel.launch(stream, launch.params.address)

    def take(self, inputs: StepInputs) -> None:
        """Point the launches' input slots at ``inputs`` (where they moved)."""
        values = _input_values(inputs)
        if values != self._bound:
            for launch in self.launches:
                for slot, name in launch.input_slots:
                    launch.params[slot] = values[name]
            self._bound = values


def check_inputs(input_ids, positions, block_tables, context_lens, device) -> tuple[int, int]:
    """(rows, tokens per row) of a step's inputs; ``StepInputError`` naming the argument where they
    are not int32 (or int64) tensors of the right dimensions on ``device`` that agree on rows × tokens."""
    for name, t, dims in (("input_ids", input_ids, 1), ("positions", positions, 1),
                          ("block_tables", block_tables, 2), ("context_lens", context_lens, 1)):
        if not isinstance(t, torch.Tensor) or t.dim() != dims:
            raise StepInputError(f"{name}: expected a {dims}-D tensor")
        if t.device != device:
            raise StepInputError(f"{name}: on {t.device}; the step takes tensors on {device} (no host copies)")
        if t.dtype not in (torch.int32, torch.int64):
            raise StepInputError(f"{name}: expected int32, got {t.dtype}")
    rows = context_lens.shape[0]
    if rows == 0 or input_ids.shape[0] % rows or positions.shape != input_ids.shape or block_tables.shape[0] != rows:
        raise StepInputError(f"input_ids {list(input_ids.shape)}, positions {list(positions.shape)}, block_tables "
                             f"{list(block_tables.shape)} and context_lens {list(context_lens.shape)} do not agree "
                             "on rows × tokens")
    return rows, input_ids.shape[0] // rows


def check_draft_probs(sampling: Sampling | None, drafts: tuple[int, int] | None, rows: int, device) -> None:
    """Refuse (``StepInputError``) the proposer's distributions where the band's step does not take
    them, or missing or misshaped where it does (``drafts``: the band's (drafts, vocab))."""
    q = sampling.draft_probs if sampling is not None else None
    if drafts is None and q is not None:
        raise StepInputError("sampling.draft_probs: this step does not take them (a verify step of a package "
                             "compiled with verify: {draft_probs: true} does)")
    if drafts is not None and (not isinstance(q, torch.Tensor) or tuple(q.shape) != (rows, *drafts)
                               or q.dtype != torch.float32 or q.device != torch.device(device) or not q.is_contiguous()):
        raise StepInputError(f"sampling.draft_probs: expected contiguous torch.float32 [{rows}, {drafts[0]}, "
                             f"{drafts[1]}] on {device}: each draft's distribution the proposer drew it from")


def check_sampling(sampling: Sampling | None, head: str, rows: int, device) -> None:
    """Refuse (``StepInputError``) sampling settings a step of a package whose head is ``head``
    cannot take for ``rows`` rows on ``device``: missing for a sampling head, given to another, or
    not ``runtime.Sampling``'s dtypes, [rows] each, on the device."""
    if (sampling is not None) != (head == "sample"):
        raise StepInputError("sampling: a sampling head's step takes per-row settings (runtime.Sampling)"
                             if head == "sample" else f"sampling: the package's head does not sample (head: {head})")
    for name, dtype in Sampling.DTYPES.items() if sampling is not None else ():
        t = getattr(sampling, name)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (rows,) or t.dtype != dtype or \
                t.device != torch.device(device):
            raise StepInputError(f"sampling.{name}: expected {dtype} [{rows}] on {device}")


class DecodeStep:
    """``step(input_ids, positions, block_tables, context_lens[, sampling])`` → next ids (a greedy or
    sampling head) or logits.

    ``input_ids`` and ``positions`` are [rows·tokens] (token j of row b at b·tokens + j),
    ``block_tables`` [rows, blocks], ``context_lens`` [rows] (the context including this step's
    tokens; 0 marks a padding row), all int32 on the package's device; a sampling head's step also
    takes ``sampling``, the rows' settings (``runtime.Sampling``, [rows] each, on the device; a
    verify step of a package compiled with ``verify: {draft_probs: true}`` also its drafts'
    distributions, ``Sampling.draft_probs``). The
    returned tensor is a view of the step's output buffer, overwritten by the next step of the same
    band.
    """

    def __init__(self, package, weights: PackedWeights, cache: KVCache, mode: str, group=None):
        self.package, self.mode, self.weights, self.kv_cache = package, mode, weights, cache
        deployment = package.manifest.deployment
        rope = rope_table(package.geometry, deployment.max_context, package.device)
        specs = band_specs(package.manifest, mode)
        self.group = group  # one rank a process (tensor parallelism): the ranks' process group
        buffers = bind_peers(package, specs, rope, group) if group is not None else [None] * len(specs)
        self._bands = [_BandStep(package, s, weights, cache, rope, b) for s, b in zip(specs, buffers)]
        self.greedy = deployment.head != "logits"
        self.debug_waits = deployment.debug_wait_spins > 0
        self._thread = threading.get_ident()
        self._last: tuple[_BandStep, int] | None = None

    @property
    def bands(self) -> tuple[tuple[int, int], ...]:
        return tuple((b.band.rows, b.band.tokens) for b in self._bands)

    def serves(self, rows: int, tokens: int = 1, longest_context: int = 0) -> str | None:
        """None where a step of ``rows`` × ``tokens``, its longest context ``longest_context``, is
        served; else why not (host-side, from the package's bands: an engine routes by it)."""
        bands = tuple(b.band for b in self._bands)
        return step_refusal(bands, self.package.manifest.deployment.max_context, rows, tokens, longest_context)

    def band_for(self, rows: int, tokens: int) -> _BandStep:
        for b in self._bands:
            if b.band.tokens == tokens and b.band.rows >= rows:
                return b
        served = ", ".join(f"{r}×{t}" for r, t in self.bands)
        raise StepInputError(f"{rows} rows × {tokens} tokens: no band serves it (the package serves rows × tokens "
                             f"up to {served})")

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, sampling: Sampling | None = None) -> torch.Tensor:
        device = self.package.device
        rows, tokens = check_inputs(input_ids, positions, block_tables, context_lens, device)
        check_sampling(sampling, self.package.manifest.deployment.head, rows, device)
        band = self.band_for(rows, tokens)
        check_draft_probs(sampling, band.drafts, rows, device)
        if threading.get_ident() != self._thread:
            self.package.make_current()
            self._thread = threading.get_ident()
        inputs = band.prepare(input_ids, positions, block_tables, context_lens, device, sampling)
        band.run(inputs, torch.cuda.current_stream(device).cuda_stream)
        if self.debug_waits and self.group is not None:
            check_group_hang_logs(self.package.manifest, band.spec, band.buffers, band.buffers.rank_binding.rank,
                                  self.group)
        elif self.debug_waits:
            check_hang_log(band.buffers.hang_log, band.buffers.counters, self.package.manifest, band.spec)
        m = rows * tokens
        self._last = (band, m)
        return band.buffers.next_ids[:m] if self.greedy else band.buffers.logits[:m]

    def stage_clock(self, rows: int = 1, tokens: int = 1) -> tuple[torch.Tensor, Step]:
        """A profiling build's clocks (``--stage-clock``) of the last step run in the band serving
        rows × tokens: [launches, CTAs, slots] int64 on the device, and the band's launches."""
        band = self.band_for(rows, tokens)
        if band.buffers.stage_clock.numel() == 0:
            raise StepInputError(f"{self.package.path}: not a profiling build (compile with --stage-clock)")
        return band.buffers.stage_clock, band.spec

    @property
    def verdict(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last step's speculative verdict, for a verify band (rows × (1 + drafts) tokens, token
        j + 1 of a row the draft for what token j predicts): ``accepted`` int32 [rows], how many
        leading drafts equal the ids the head decided (greedy, or drawn by a sampling head), and
        ``emitted`` int32 [rows, tokens], the ids to emit (the accepted drafts, then the correction
        or bonus id; −1 after them; with ``verify.draft_probs`` the speculative-sampling rule's
        verdict, docs/runtime.md). Views of the step's own buffers, on the device (the next
        step's inputs can be laid out from them there). A padding row's verdict means nothing."""
        if self._last is None:
            raise RuntimeError("no step has run yet")
        band, m = self._last
        if "accepted" not in band.buffers.verdict:
            raise StepInputError(f"{band.band.rows} rows × {band.band.tokens} tokens: a verdict needs a verify band "
                                 "of a package whose head is ids or sample")
        rows = m // band.band.tokens
        return band.buffers.verdict["accepted"][:rows], band.buffers.verdict["emitted"][:rows]

    @property
    def routed(self) -> dict[int, torch.Tensor]:
        """The last step's routing, per routed decoder layer: an int32 [1 + slots] view on the
        device, how many distinct experts the step's rows chose (the union over its rows; a
        padding row chooses none), then which, in expert order (-1 past them). What an engine's
        expert statistics read, and what the bench's roofline counts."""
        if self._last is None:
            raise RuntimeError("no step has run yet")
        band, _ = self._last
        return {layer: band.buffers.routed[layer] for layer in band.routed_layers}

    @property
    def logits(self) -> torch.Tensor:
        """The last step's fp32 logits [rows·tokens, vocab] (the head writes them in both head modes)."""
        if self._last is None:
            raise RuntimeError("no step has run yet")
        band, m = self._last
        return band.buffers.logits[:m]


class RanksStep:
    """Every rank of a package split over ranks (``tensor_parallel``), on this one device:
    ``step(input_ids, positions, block_tables, context_lens[, sampling])`` → the next ids (every rank decides
    the same), or with a logits head the whole vocabulary's logits (every rank gathers the same).
    Each launch of the step runs for every rank, rank after rank, on the caller's
    stream, so each all-reduce finds every rank's partial written and signalled before it: the
    split programs, their cross-rank counters and their rank-order sums run as on N GPUs, their
    peers' buffers in this device's memory. For testing the split programs on one GPU; a rank a
    process (on N GPUs) binds with ``Package.bind(..., group=)``."""

    def __init__(self, package, weights: list[PackedWeights], caches: list[KVCache], mode: str):
        manifest = package.manifest
        d, g = manifest.deployment, manifest.geometry
        tp = TensorParallel(d.tensor_parallel)
        self.package, self.weights, self.kv_caches = package, weights, caches
        rope = rope_table(g, d.max_context, package.device)
        self._bands = []
        for spec in band_specs(manifest, mode):
            buffers = [band_buffers(manifest, spec, package.device, rope) for _ in range(tp.size)]
            for rank, b in enumerate(buffers):
                b.rank_binding = RankBinding.of(tp, g, rank, buffers)
            self._bands.append([_BandStep(package, spec, weights[rank], caches[rank], rope, buffers[rank])
                                for rank in range(tp.size)])

    def band_for(self, rows: int, tokens: int) -> list[_BandStep]:
        """The ranks' steps of the band serving rows × tokens."""
        for ranks in self._bands:
            if ranks[0].band.tokens == tokens and ranks[0].band.rows >= rows:
                return ranks
        raise StepInputError(f"{rows} rows × {tokens} tokens: no band serves it")

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, sampling: Sampling | None = None) -> torch.Tensor:
        device = self.package.device
        rows, tokens = check_inputs(input_ids, positions, block_tables, context_lens, device)
        check_sampling(sampling, self.package.manifest.deployment.head, rows, device)
        ranks = self.band_for(rows, tokens)
        check_draft_probs(sampling, ranks[0].drafts, rows, device)
        for band in ranks:
            band.take(band.prepare(input_ids, positions, block_tables, context_lens, device, sampling))
        stream = torch.cuda.current_stream(device).cuda_stream
        for k in range(len(ranks[0].launches)):
            for band in ranks:
                launch = band.launches[k]
                launch.kernel.launch(stream, launch.params.address)
        if self.package.manifest.deployment.debug_wait_spins:
            check_ranks_hang_logs(self.package.manifest, [(b.spec, b.buffers) for b in ranks])
        out = ranks[0].buffers
        return out.logits[:rows * tokens] if self.package.manifest.deployment.head == "logits" \
            else out.next_ids[:rows * tokens]


def band_specs(manifest, mode: str) -> list[Step]:
    """The package's steps in ``mode``, narrowest band first (the order ``band_for`` searches)."""
    return sorted((s for s in manifest.steps if s.mode == mode), key=lambda s: (s.band.tokens, s.band.rows))


def bind_peers(package, specs: list[Step], rope: torch.Tensor, group) -> list[StepBuffers]:
    """One rank a process: this rank's buffers of each band, bound to its peers' through ``group``
    (``runtime.peers.exchange``; collective), its place (rank, vocabulary rows) from the group."""
    import torch.distributed as dist

    from .peers import exchange, shared_regions

    manifest = package.manifest
    g, tp = manifest.geometry, TensorParallel(manifest.deployment.tensor_parallel)
    rank = dist.get_rank(group)
    buffers = [band_buffers(manifest, spec, package.device, rope) for spec in specs]
    for b, ranks in zip(buffers, exchange(buffers, shared_regions(manifest), group)):
        b.rank_binding = RankBinding.of(tp, g, rank, ranks)
    return buffers
