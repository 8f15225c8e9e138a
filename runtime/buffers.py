"""Everything a step's launches read and write besides weights, bound by argument name.

``StepBuffers`` allocates, once, the scratch regions of a band's programs (each the largest any
program declares under that name), two fp32 hidden-state buffers the layers ping-pong between
(each holding as many split-K partials as the layers write), the logits and next ids, a counter
block for each layer a launch runs and the RoPE table (which bands may share). ``args`` resolves a
program's named ABI to tensors for one launch, so the step path itself allocates nothing; a
layer loop's offset table is built there, once, the first time a launch asks for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from .layer_table import layer_offsets
from .manifest import COUNTERS_PER_LAYER
from .rope import rope_table
from .weights import PackedWeights

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32, "i64": torch.int64}
_IO = {"x_in", "x_out", "logits", "next_ids"}
_LAYER_WEIGHTS = {"attn_norm", "w_qkv", "b_qkv", "q_norm", "k_norm", "w_o", "mlp_norm", "w_gate_up", "w_down"}


@dataclass(frozen=True)
class StepInputs:
    tokens: torch.Tensor  # int32 [rows·tokens]
    positions: torch.Tensor  # int32 [rows·tokens]
    block_tables: torch.Tensor  # int32 [rows, max blocks per row]
    context_lens: torch.Tensor  # int32 [rows]; 0 marks a padding row


class StepBuffers:
    def __init__(self, geometry: dict, regions: Iterable, m: int, launches: Sequence[tuple[int, int]],
                 max_context: int, device=None, poison: bool = False, rope: torch.Tensor | None = None,
                 hang_slots: int = 0, clock_slots: int = 0):
        """``launches``: for each of the step's launches, (the decoder layers it runs — 1 but for a
        layer loop's — and its grid). A profiling build (``clock_slots`` > 0) gives each launch a
        [layers, grid, clock_slots] block of the clock."""
        regions = list(regions)
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        for r in regions:
            if r.kind != "scratch":
                continue
            old = shapes.get(r.name)
            if old is None or _numel(r.shape) > _numel(old[0]):
                shapes[r.name] = (tuple(r.shape), r.dtype)
        fill = float("nan") if poison else 0.0
        self.scratch = {n: _alloc(s, d, device, poison) for n, (s, d) in shapes.items()}
        # The hidden state between programs: [split-K partials, m, hidden], as the layers' x_in says.
        act_shape = next((tuple(r.shape) for r in regions if r.name == "x_in"), (1, m, geometry["hidden"]))
        self.act = [torch.full(act_shape, fill, dtype=torch.float32, device=device) for _ in range(2)]
        self.logits = torch.full((m, geometry["vocab"]), fill, dtype=torch.float32, device=device)
        self.next_ids = torch.full((m,), -1, dtype=torch.int32, device=device)
        # a block of counters for each layer a launch runs (rows as StepSpec.layer_launches lists them)
        self.counters = torch.zeros(sum(layers for layers, _ in launches), COUNTERS_PER_LAYER, dtype=torch.int64,
                                    device=device)
        self._first_row = [sum(layers for layers, _ in launches[:i]) for i in range(len(launches))]
        self.hang_log = torch.zeros(1 + 4 * hang_slots, dtype=torch.int64, device=device)  # debug builds
        # profiling builds: per launch, per layer it runs, per CTA, the SM id then (start, end) ns per stage
        self._clock_blocks = [(layers, grid, clock_slots) for layers, grid in launches]
        sizes = [layers * grid * clock_slots for layers, grid in launches]
        self._clock_at = [sum(sizes[:i]) for i in range(len(sizes))]
        self.stage_clock = torch.zeros(sum(sizes), dtype=torch.int64, device=device)
        self.rope = rope if rope is not None else rope_table(geometry, max_context, device)
        self.layers = geometry["layers"]
        self._layer_offsets: torch.Tensor | None = None

    def args(self, arg_names: Sequence[str], launch: int, layer: int | None, kind: str,
             weights: PackedWeights, k_caches: Sequence[torch.Tensor], v_caches: Sequence[torch.Tensor],
             inputs: StepInputs) -> list:
        """The launch's arguments, in ABI order."""
        return [self._one(n, launch, layer, kind, weights, k_caches, v_caches, inputs) for n in arg_names]

    def _one(self, name, launch, layer, kind, weights, k_caches, v_caches, inputs):
        if name in _LAYER_WEIGHTS:
            return getattr(weights.layers[layer], name)
        if name in self.scratch:
            return self.scratch[name]
        if name in _IO:
            return self._io(name, layer, kind)
        if name == "stage_clock":  # the launch's [layers, grid, slots] block
            return self.stage_clock[self._clock_at[launch]:]
        if name == "layer_offsets":
            if self._layer_offsets is None:
                self._layer_offsets = layer_offsets(weights, k_caches, v_caches, self.counters.device)
            return self._layer_offsets
        table = {
            "embed": weights.embed, "final_norm": weights.final_norm, "w_head": weights.w_head,
            "tokens": inputs.tokens, "positions": inputs.positions, "block_tables": inputs.block_tables,
            "context_lens": inputs.context_lens, "rope": self.rope, "counters": self.counters[self._first_row[launch]],
            "hang_log": self.hang_log,
        }
        if name in table:
            return table[name]
        if name in ("k_cache", "v_cache"):
            return (k_caches if name == "k_cache" else v_caches)[layer]
        if name == "bt_stride":
            return inputs.block_tables.stride(0)
        raise KeyError(f"no buffer for argument {name!r}")

    def clock_rows(self) -> torch.Tensor:
        """A profiling build's clocks as [layer launches, CTAs, slots] (a layer loop's launch
        expanded to one block per layer, as ``StepSpec.layer_launches`` lists them; CTAs up to
        the widest grid, zero past a launch's own): a copy, for after the step."""
        grid = max((g for _, g, _ in self._clock_blocks), default=0)
        slots = max((c for _, _, c in self._clock_blocks), default=0)
        out = torch.zeros(sum(n for n, _, _ in self._clock_blocks), grid, slots, dtype=torch.int64,
                          device=self.stage_clock.device)
        row = 0
        for (layers, g, c), at in zip(self._clock_blocks, self._clock_at):
            out[row:row + layers, :g, :c] = self.stage_clock[at:at + layers * g * c].view(layers, g, c)
            row += layers
        return out

    def _io(self, name: str, layer: int | None, kind: str) -> torch.Tensor:
        if name == "logits":
            return self.logits
        if name == "next_ids":
            return self.next_ids
        # embed writes act[0]; layer l reads act[l % 2] and writes the other; the head reads the last.
        index = {"embed": 0, "head": self.layers}.get(kind, layer)
        if name == "x_out":
            return self.act[(index + 1) % 2] if kind == "layer" else self.act[0]
        return self.act[index % 2]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _alloc(shape, dtype: str, device, poison: bool) -> torch.Tensor:
    t = TORCH_DTYPES[dtype]
    if not poison:
        return torch.zeros(shape, dtype=t, device=device)
    if t.is_floating_point:
        return torch.full(shape, float("nan"), dtype=t, device=device)
    return torch.full(shape, -(2**30), dtype=t, device=device)
