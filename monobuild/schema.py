"""The records the compiler writes into a package and the runtime reads back: one definition each.

Standard library only, so a serving image imports it without the compiler, Triton or torch. The
planner builds its plan from these (a program's stages, regions, sync edges and named ABI), the
package writer serialises them, and the runtime's manifest reader rebuilds the same classes:
there is no second, mirrored set of classes to keep in step.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}

#: Where the runtime finds a kernel argument (``Arg.role``):
ROLES = (
    "io",  # the hidden state between launches, the logits, the next ids
    "scratch",  # a cross-CTA region of one launch, allocated once per band
    "kv_cache",  # the layer's K or V cache (the engine's, in place)
    "layer_weight",  # a tensor of the launch's decoder layer
    "model_weight",  # the embedding, the final norm, the LM head
    "step_input",  # the step's token ids, positions, block tables, context lengths
    "table",  # a table computed once at bind (the RoPE cos/sin)
    "sync",  # the launch's block of sync-edge counters
    "debug",  # a debug build's hang log, a profiling build's stage clock
)


@dataclass(frozen=True, order=True)
class Band:
    """Rows per step and tokens per row (tokens > 1 is a speculative verify)."""

    rows: int
    tokens: int = 1

    @property
    def m(self) -> int:
        """Query rows the programs process: rows × tokens."""
        return self.rows * self.tokens

    @property
    def name(self) -> str:
        return f"r{self.rows}t{self.tokens}"


@dataclass(frozen=True)
class Arg:
    """One kernel parameter of a program's named ABI, and where the runtime binds it from."""

    name: str
    type: str  # Triton signature type: *bf16, *fp32, *i32, *i64 (device pointers) or i32
    role: str  # one of ROLES

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"argument {self.name}: unknown role {self.role!r} (known: {', '.join(ROLES)})")


@dataclass(frozen=True)
class Region:
    """Memory a program writes or reads across CTAs (weights, read-only, are not regions)."""

    name: str
    kind: str  # io (the program's input/output) | scratch | kv_cache
    dtype: str
    shape: tuple[int, ...]
    writer: str | None  # the stage that writes it; None: written before the launch
    readers: tuple[str, ...]
    # Why a reader in the writer's own stage needs no sync edge (checked by contract C1): the
    # reads and writes touch disjoint elements, or each CTA reads back only what it wrote.
    same_stage: str | None = None

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for dim in self.shape:
            n *= dim
        return n


@dataclass(frozen=True)
class Stage:
    """One op as a program runs it: its place in its kind's op list and the bytes it must move."""

    index: int  # the op's position in the layer's (or head's) op list: its clock slots 1 + 2·index, 2 + 2·index
    name: str
    tasks: int
    task: str  # what one task does
    weight_bytes: int  # weights it must read once
    kv_bytes_per_token: int  # KV cache it must read per token of context (all rows of the band)
    io_bytes: int  # other bytes that must move through HBM (KV appends, embeddings, logits)


@dataclass(frozen=True)
class SyncEdge:
    counter: int  # index in the launch's counter block
    producer: str
    consumer: str
    regions: tuple[str, ...]  # regions the edge orders (written by producer, read by consumer)
    signals_per_epoch: int  # every CTA of the grid signals once per step
