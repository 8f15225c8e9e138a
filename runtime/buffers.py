"""Everything a step's launches read and write, bound by each argument's role in the named ABI.

``StepBuffers`` allocates, once, the scratch regions of a band's programs (each the largest any
program declares under that name), two fp32 hidden-state buffers the layers ping-pong between
(each holding as many split-K partials as the layers write), the logits and next ids, one
counter block per launch (as many counters as the band's programs use), a verify band's verdict
(accepted counts and emitted ids), a routed layer's record of the experts its rows chose (one per
decoder layer: its staged launches share it) and the RoPE table (which bands may share). ``args`` resolves
a program's ABI to tensors for one launch, so the step path itself allocates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..footprint import HANG_RECORD, ROUTED, StepLayout, step_layout
from ..parallel import SITES as PEER_SITES
from ..parallel import SLOTS as PEER_SLOTS
from ..parallel import TensorParallel
from ..schema import LAYER_KINDS, Arg, Geometry
from .rope import rope_table
from .weights import PackedWeights

TORCH_DTYPES = {"fp8e4nv": torch.float8_e4m3fn, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                "i32": torch.int32, "i64": torch.int64}


@dataclass(frozen=True)
class Sampling:
    """A sampling head's per-row settings, device tensors the engine writes (a replay reads them)."""

    temperature: torch.Tensor  # fp32 [rows]; 0: the greedy id
    top_k: torch.Tensor  # int32 [rows]; 0: no limit
    top_p: torch.Tensor  # fp32 [rows]; 1: no limit (≤ 0: the greedy id)
    seed: torch.Tensor  # int64 [rows]: with the token's position, the key of its draws
    # A verify step of a package compiled with ``verify: {draft_probs: true}``: fp32 [rows, drafts,
    # vocab], draft j's row the distribution the proposer drew it from (the verdict's q)
    draft_probs: torch.Tensor | None = None

    #: the per-row settings (``draft_probs`` is per draft, and a verify step's alone)
    DTYPES = {"temperature": torch.float32, "top_k": torch.int32, "top_p": torch.float32, "seed": torch.int64}


@dataclass(frozen=True)
class StepInputs:
    tokens: torch.Tensor  # int32 [rows·tokens]
    positions: torch.Tensor  # int32 [rows·tokens]
    block_tables: torch.Tensor  # int32 [rows, max blocks per row]
    context_lens: torch.Tensor  # int32 [rows]; 0 marks a padding row
    sampling: Sampling | None = None  # a sampling head's


def input_copies(m: int, rows: int, max_blocks: int, device, sampled: bool = False,
                 drafts: tuple[int, int] | None = None) -> StepInputs:
    """A band's own step inputs, which callers' inputs of another shape are copied and padded into
    (with ``drafts``, (drafts, vocab): the proposer's distributions a verify band's verdict takes)."""
    i32 = dict(dtype=torch.int32, device=device)
    q = torch.zeros(rows, *drafts, dtype=torch.float32, device=device) if drafts else None
    sampling = Sampling(*(torch.zeros(rows, dtype=t, device=device) for t in Sampling.DTYPES.values()), q) \
        if sampled else None
    return StepInputs(torch.zeros(m, **i32), torch.zeros(m, **i32), torch.zeros(rows, max_blocks, **i32),
                      torch.zeros(rows, **i32), sampling)


@dataclass(frozen=True)
class RankBinding:
    """A rank's place under tensor parallelism, which its programs' ``rank`` and ``peer``
    arguments bind: its index, its vocabulary rows (the first, and how many are real ids) and
    every rank's step buffers, by rank (its own among them), whose partials and cross-rank
    counters its programs read and signal: the ranks' ``StepBuffers`` where they share this
    process (``bind_ranks``), a peer's ``runtime.peers.PeerBuffers`` where it is another's."""

    rank: int
    vocab_start: int
    vocab_valid: int
    peers: Sequence  # each with .tp_counters and .scratch

    @classmethod
    def of(cls, tp: TensorParallel, geometry: Geometry, rank: int, peers: Sequence) -> RankBinding:
        """Rank ``rank``'s binding: its rows of the padded vocabulary, of which those below the
        model's vocabulary are real ids."""
        start, stop = tp.vocab_range(geometry, rank)
        return cls(rank, start, max(0, min(stop, geometry.vocab) - start), peers)


def band_buffers(manifest, spec, device, rope: torch.Tensor | None = None) -> StepBuffers:
    """The buffers of one band's step (``schema.Step``): the regions, counters and logs of the
    programs it launches, as the manifest declares them (``footprint.step_layout``); under tensor
    parallelism one rank's (its geometry's logits, its cross-rank counters)."""
    layout = step_layout(manifest, spec)
    ranks = manifest.deployment.tensor_parallel
    geometry = TensorParallel(ranks).rank_geometry(manifest.geometry)
    return StepBuffers(geometry, layout, spec.band.m, manifest.deployment.max_context, device, rope=rope, ranks=ranks)


class StepBuffers:
    def __init__(self, geometry: Geometry, layout: StepLayout, m: int, max_context: int, device=None,
                 poison: bool = False, rope: torch.Tensor | None = None, ranks: int = 1):
        fill = float("nan") if poison else 0.0
        self.scratch = {n: _alloc(tuple(r.shape), r.dtype, device, poison) for n, r in layout.scratch.items()}
        # a verify band's greedy verdict (the head's accepted counts and emitted ids), as declared
        self.verdict = {r.name: torch.full(tuple(r.shape), -1, dtype=TORCH_DTYPES[r.dtype], device=device)
                        for r in layout.verdict}
        self.act = [torch.full(layout.act_shape(m, geometry.hidden), fill, dtype=torch.float32, device=device)
                    for _ in range(2)]
        self.logits = torch.full(layout.logits_shape(m, geometry.vocab), fill, dtype=torch.float32, device=device)
        self.next_ids = torch.full((m,), -1, dtype=torch.int32, device=device)
        # per decoder layer, the experts a routed layer's rows chose: how many, then which (-1 past them)
        routed = (geometry.layers, *layout.routed) if layout.routed else (0, 0)
        self.routed = torch.full(routed, -1, dtype=torch.int32, device=device)
        self.counters = torch.zeros(layout.launches, max(layout.counters, 1), dtype=torch.int64, device=device)
        self.hang_log = torch.zeros(1 + HANG_RECORD * layout.hang_slots, dtype=torch.int64, device=device)  # debug
        # profiling builds: per launch, per CTA, the SM id then (start, end) ns per stage
        self.stage_clock = torch.zeros(layout.launches, *layout.clock_shape, dtype=torch.int64, device=device)
        self.rope = rope if rope is not None else rope_table(geometry, max_context, device)
        self.layers = geometry.layers
        # tensor parallelism: the counters every rank's producers signal, one per (site, source rank)
        self.tp_counters = torch.zeros(PEER_SITES * PEER_SLOTS if ranks > 1 else 0, dtype=torch.int64, device=device)
        self.rank_binding: RankBinding | None = None  # set once every rank's buffers exist

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers this step holds of its own (the RoPE table, which bands share, aside)."""
        tensors = [*self.scratch.values(), *self.act, self.logits, self.next_ids, self.counters, self.hang_log,
                   self.stage_clock, *self.verdict.values(), self.routed, self.tp_counters]
        return sum(t.numel() * t.element_size() for t in tensors)

    def args(self, abi: Sequence[Arg], launch: int, layer: int | None, kind: str, weights: PackedWeights,
             k_caches: Sequence[torch.Tensor], v_caches: Sequence[torch.Tensor], inputs: StepInputs,
             scalars: Sequence[tuple[str, int]] = ()) -> list:
        """The launch's arguments, in ABI order; ``scalars`` are the program's band arguments' values."""
        band = dict(scalars)
        return [band[a.name] if a.role == "band" and a.name in band
                else self._one(a, launch, layer, kind, weights, k_caches, v_caches, inputs) for a in abi]

    def _one(self, arg: Arg, launch, layer, kind, weights, k_caches, v_caches, inputs):
        name, role = arg.name, arg.role
        found = None
        if role == "layer_weight":
            found = getattr(weights.layers[layer], name, None)
        elif role == "model_weight":
            found = {"embed": weights.embed, "final_norm": weights.final_norm, "w_head": weights.w_head}.get(name)
        elif role == "scratch":
            found = self.scratch.get(name)
        elif role == "io":
            found = self.routed[layer] if name == ROUTED else self._io(name, layer, kind)
        elif role == "kv_cache":
            # k_tiles / v_tiles: the same caches, read by TMA in a streaming program
            found = {"k_cache": k_caches, "v_cache": v_caches, "k_tiles": k_caches, "v_tiles": v_caches}.get(name)
            found = found[layer] if found is not None else None
        elif role == "step_input":
            if name in Sampling.DTYPES or name == "draft_probs":
                found = getattr(inputs.sampling, name, None)
            else:
                found = inputs.block_tables.stride(0) if name == "bt_stride" else getattr(inputs, name, None)
        elif role == "table" and name == "rope":
            found = self.rope
        elif role == "sync" and name == "counters":
            found = self.counters[launch]
        elif role == "debug":
            found = {"hang_log": self.hang_log, "stage_clock": self.stage_clock[launch]}.get(name)
        elif role == "tp_sync" and name == "tp_counters":
            found = self.tp_counters
        elif role in ("rank", "peer") and self.rank_binding is not None:
            found = self._rank_arg(name, role)
        if found is None:
            raise KeyError(f"no buffer for argument {name!r} (role {role})")
        return found

    def _rank_arg(self, name: str, role: str):
        """A ``rank`` value of this rank's, or a ``peer`` buffer (``<buffer>_peer<s>``) of rank s's."""
        binding = self.rank_binding
        if role == "rank":
            return getattr(binding, name, None)
        buffer, _, s = name.rpartition("_peer")
        if not s.isdigit() or int(s) >= len(binding.peers):
            return None
        peer = binding.peers[int(s)]
        return peer.tp_counters if buffer == "tp_counters" else peer.scratch.get(buffer)

    def _io(self, name: str, layer: int | None, kind: str) -> torch.Tensor | None:
        if name == "logits":
            return self.logits
        if name == "next_ids":
            return self.next_ids
        if name in self.verdict:
            return self.verdict[name]
        if name not in ("x_in", "x_out"):
            return None
        # embed writes act[0]; layer l reads act[l % 2] and writes the other; the head reads the last.
        index = {"embed": 0, "head": self.layers}.get(kind, layer)
        if name == "x_out":
            return self.act[(index + 1) % 2] if kind in LAYER_KINDS else self.act[0]
        return self.act[index % 2]


def _alloc(shape, dtype: str, device, poison: bool) -> torch.Tensor:
    t = TORCH_DTYPES[dtype]
    if not poison:
        return torch.zeros(shape, dtype=t, device=device)
    if t.is_floating_point:
        return torch.full(shape, float("nan"), dtype=t, device=device)
    return torch.full(shape, -(2**30), dtype=t, device=device)
