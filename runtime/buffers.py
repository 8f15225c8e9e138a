"""Everything a step's launches read and write besides weights, bound by argument name.

``StepBuffers`` allocates, once, the scratch regions of a band's programs (each the largest any
program declares under that name), two fp32 hidden-state buffers the layers ping-pong between
(each holding as many split-K partials as the layers write), the logits and next ids, one
counter block per launch and the RoPE table (which bands may share). ``args`` resolves a
program's named ABI to tensors for one launch, so the step path itself allocates nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from .rope import rope_table
from .weights import PackedWeights

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32, "i64": torch.int64}
COUNTERS_PER_LAUNCH = 8
_IO = {"x_in", "x_out", "logits", "next_ids"}
_LAYER_WEIGHTS = {"attn_norm", "w_qkv", "b_qkv", "q_norm", "k_norm", "w_o", "mlp_norm", "w_gate_up", "w_down"}


@dataclass(frozen=True)
class StepInputs:
    tokens: torch.Tensor  # int32 [rows·tokens]
    positions: torch.Tensor  # int32 [rows·tokens]
    block_tables: torch.Tensor  # int32 [rows, max blocks per row]
    context_lens: torch.Tensor  # int32 [rows]; 0 marks a padding row


class StepBuffers:
    def __init__(self, geometry: dict, regions: Iterable, m: int, launches: int, max_context: int,
                 device=None, poison: bool = False, rope: torch.Tensor | None = None, hang_slots: int = 0,
                 clock_shape: tuple[int, int] = (0, 0)):
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
        self.counters = torch.zeros(launches, COUNTERS_PER_LAUNCH, dtype=torch.int64, device=device)
        self.hang_log = torch.zeros(1 + 4 * hang_slots, dtype=torch.int64, device=device)  # debug builds
        # profiling builds: per launch, per CTA, the SM id then (start, end) ns per stage
        self.stage_clock = torch.zeros(launches, *clock_shape, dtype=torch.int64, device=device)
        self.rope = rope if rope is not None else rope_table(geometry, max_context, device)
        self.layers = geometry["layers"]

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
        table = {
            "embed": weights.embed, "final_norm": weights.final_norm, "w_head": weights.w_head,
            "tokens": inputs.tokens, "positions": inputs.positions, "block_tables": inputs.block_tables,
            "context_lens": inputs.context_lens, "rope": self.rope, "counters": self.counters[launch],
            "hang_log": self.hang_log, "stage_clock": self.stage_clock[launch],
        }
        if name in table:
            return table[name]
        if name in ("k_cache", "v_cache"):
            return (k_caches if name == "k_cache" else v_caches)[layer]
        if name == "bt_stride":
            return inputs.block_tables.stride(0)
        raise KeyError(f"no buffer for argument {name!r}")

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
