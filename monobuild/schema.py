"""The records the compiler writes into a package and the runtime reads back: one definition each.

Standard library only, so a serving image imports it without the compiler, Triton or torch. The
planner builds its plan from these (the model's geometry, what the package serves, a program's
stages, regions, sync edges and named ABI), the package writer serialises them, and the
runtime's manifest reader rebuilds the same classes: there is no second, mirrored set of classes
to keep in step, and nothing crosses the line as a string-keyed dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: Bytes of each dtype a region, tensor or argument may have. ``fp8e4nv`` is OCP FP8 E4M3 (torch's
#: ``float8_e4m3fn``), under the name Triton's signatures give it.
DTYPE_BYTES = {"fp8e4nv": 1, "bf16": 2, "fp16": 2, "fp32": 4, "i32": 4, "i64": 8}

#: Where the runtime finds a kernel argument (``Arg.role``):
ROLES = (
    "io",  # the hidden state between launches, the logits, the next ids
    "scratch",  # a cross-CTA region of one launch, allocated once per band
    "kv_cache",  # the layer's K or V cache (the engine's, in place)
    "layer_weight",  # a tensor of the launch's decoder layer
    "model_weight",  # the embedding, the final norm, the LM head
    "step_input",  # the step's token ids, positions, block tables, context lengths
    "table",  # a table computed once at bind (the RoPE cos/sin)
    "band",  # a staged program's band constant (rows, KV splits, grid), given per program in the manifest
    "sync",  # the launch's block of sync-edge counters
    "debug",  # a debug build's hang log, a profiling build's stage clock
    "peer",  # another rank's buffer under tensor parallelism: its partials, tile parts or cross-rank counters
    "rank",  # a value of the rank's own under tensor parallelism: its index, its vocabulary rows' start and end
    "tp_sync",  # the rank's cross-rank counters (tensor parallelism), which every rank's producers signal
)


#: The kinds of program that run a decoder layer: a dense one's, a routed (mixture-of-experts) one's.
LAYER_KINDS = ("layer", "moe")


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
    type: str  # Triton signature type: *fp8e4nv, *bf16, *fp32, *i32, *i64 (device pointers) or i32
    role: str  # one of ROLES

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"argument {self.name}: unknown role {self.role!r} (known: {', '.join(ROLES)})")


@dataclass(frozen=True)
class TensorMap:
    """How the runtime encodes a TMA descriptor argument (a streamed weight) over the tensor it
    binds: the compiled copies assume this box and swizzle (Triton's descriptor metadata), so the
    descriptor must be built with them (``cuTensorMapEncodeTiled``)."""

    arg: str
    box: tuple[int, ...]  # elements one copy moves along each dimension, outermost first
    swizzle: int  # CU_TENSOR_MAP_SWIZZLE_*: 0 none, 1 32 B, 2 64 B, 3 128 B
    elem_bytes: int


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
    # weights it reads once for each routed expert the step's rows select (the union over the
    # band's rows): what a routed op moves depends on routing, known only on the device
    bytes_per_expert: int = 0

    def bytes_moved(self, attended: int, experts: int = 0) -> int:
        """Bytes the stage must move when each row attends to ``attended`` cached positions and
        (a routed stage) the step's rows chose ``experts`` distinct experts."""
        return self.weight_bytes + self.io_bytes + self.kv_bytes_per_token * attended + self.bytes_per_expert * experts


@dataclass(frozen=True)
class SyncEdge:
    counter: int  # index in the launch's counter block
    producer: str
    consumer: str
    regions: tuple[str, ...]  # regions the edge orders (written by producer, read by consumer)
    signals_per_epoch: int  # every CTA of the grid signals once per step


@dataclass(frozen=True)
class CrossRankSite:
    """Where a program meets the other ranks (tensor parallelism): after op ``op`` it signals
    (``kind`` signal) every rank's counter of ``site``, or before it waits (``kind`` wait) for
    every rank's signal of ``site``; ``ranks`` ranks meet there."""

    op: str
    kind: str  # signal | wait
    site: int
    ranks: int


@dataclass(frozen=True)
class Launch:
    program: str
    layer: int | None  # the decoder layer it runs (weights, KV cache, counters), None for embed/head


@dataclass(frozen=True)
class Step:
    """The ordered launches of one decode step for a band in a mode."""

    band: Band
    mode: str
    launches: tuple[Launch, ...]


@dataclass(frozen=True)
class RopeScaling:
    """llama3-style frequency scaling (Llama 3.1/3.2)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts MLP (Qwen3-MoE, Mixtral): a router picks ``top_k`` of ``count``
    experts per token row, each a gated MLP of ``intermediate`` rows, and the row's MLP output is
    their outputs weighted by the router's softmax over all experts, taken at the chosen ones
    (renormalized to sum to 1 where ``normalize``: Qwen3-MoE's ``norm_topk_prob``, always for
    Mixtral). Shared experts, which every token runs (DeepSeek, Qwen2-MoE), are
    ``shared_intermediate`` rows; 0: none."""

    count: int
    top_k: int
    intermediate: int
    normalize: bool
    shared_intermediate: int = 0

    def selected(self, rows: int) -> int:
        """The most distinct experts ``rows`` token rows can select: the slots a step's routed
        work is laid out over."""
        return min(self.count, rows * self.top_k)


@dataclass(frozen=True)
class Geometry:
    family: str
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    norm_eps: float
    rope_theta: float
    rope_kind: str
    rope_scaling: RopeScaling | None
    tied_head: bool
    qkv_bias: bool
    qk_norm: bool
    max_positions: int
    # sliding-window attention: a query at position p sees the keys at positions > p − window
    # (transformers' mask), in every layer; 0: full causal attention
    sliding_window: int = 0
    experts: Experts | None = None  # a mixture-of-experts model's routed MLP (None: every layer dense)
    moe_layers: tuple[int, ...] = ()  # the layers whose MLP is ``experts``; the others' is dense

    def is_moe(self, layer: int | None) -> bool:
        return layer in self.moe_layers

    def experts_chosen(self, layer: int | None, m: int, selected: dict[int, int] | None = None) -> int:
        """The distinct experts ``m`` token rows chose in ``layer``: ``selected``'s count (a step's
        record), without it the most they can; 0 outside a routed layer."""
        if not self.is_moe(layer):
            return 0
        return self.experts.selected(m) if selected is None else selected[layer]

    def attended(self, context: int) -> int:
        """Cached positions a row of ``context`` tokens attends to: all, or the window's."""
        return min(context, self.sliding_window) if self.sliding_window else context

    @property
    def qkv_rows(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def layer_weight_elems(self) -> int:
        """Elements of one dense decoder layer's weights (norms included)."""
        h, d = self.hidden, self.head_dim
        elems = self.qkv_rows * h + h * self.q_heads * d + 3 * self.intermediate * h + 2 * h
        if self.qkv_bias:
            elems += self.qkv_rows
        if self.qk_norm:
            elems += 2 * d
        return elems

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["rope_scaling"] = None if self.rope_scaling is None else dict(self.rope_scaling.__dict__)
        out["experts"] = None if self.experts is None else dict(self.experts.__dict__)
        out["moe_layers"] = list(self.moe_layers)
        return out

    @staticmethod
    def from_json(data: dict) -> Geometry:
        data = dict(data)
        if data.get("rope_scaling") is not None:
            data["rope_scaling"] = RopeScaling(**data["rope_scaling"])
        if data.get("experts") is not None:
            data["experts"] = Experts(**data["experts"])
        if isinstance(data.get("moe_layers"), list):
            data["moe_layers"] = tuple(data["moe_layers"])
        return Geometry(**data)


@dataclass(frozen=True)
class KVLayout:
    """The paged KV cache the programs read and append to: vLLM's [blocks, block_size, kv_heads,
    head_dim] per layer for K and for V."""

    dtype: str
    block_size: int


@dataclass(frozen=True)
class WeightQuant:
    """How a checkpoint stores its decoder layers' projection weights (q/k/v, o, gate/up, down):
    FP8 E4M3 with one fp32 scale per ``block_rows`` × ``block_cols`` block of each weight, as
    ``weight_scale_inv`` (the dequantized weight is ``weight · scale`` blockwise). Read from
    config.json's ``quantization_config`` (``weight_block_size``); norms, the embedding and the
    LM head stay in the model's dtype."""

    method: str  # fp8
    fmt: str  # e4m3
    block_rows: int
    block_cols: int

    @property
    def dtype(self) -> str:
        return "fp8e4nv"

    def scale_shape(self, rows: int, cols: int) -> tuple[int, int]:
        """The scales of a [rows, cols] weight: one per block, the last ones partial."""
        return -(-rows // self.block_rows), -(-cols // self.block_cols)


@dataclass(frozen=True)
class DtypeRoles:
    """The dtype of each role a tensor plays, so a quantized weight does not quantize the activations."""

    weights: str  # the norms, the embedding and the head's weight; the projections' too unless quantized
    activations: str  # activations stored for a GEMV to read (x̂, attn_out, h)
    kv: str  # the KV cache
    accumulators: str = "fp32"  # products, sums, the hidden state between layers, the logits
    scales: str | None = None  # the projections' per-block scales (quantized weights only)
    projections: str | None = None  # the decoder layers' projection weights, where not ``weights`` (fp8e4nv)

    @property
    def projection(self) -> str:
        return self.projections or self.weights


def takes_draft_probs(deployment, band: Band) -> bool:
    """Whether a step of ``band`` takes the proposer's distributions of its drafts ([rows, drafts,
    vocab] fp32): a verify band's, where the recipe asked for them (``deployment``: the compiler's
    or the package's record of it)."""
    return deployment.draft_probs and band.tokens > 1


@dataclass(frozen=True)
class PackageDeployment:
    """What a package serves, as the runtime needs it (the compiler's Deployment, less the target)."""

    dtypes: DtypeRoles
    kv_cache: KVLayout
    bands: tuple[Band, ...]
    max_context: int
    head: str  # logits | ids | sample
    modes: tuple[str, ...]
    lifetime_steps: int
    debug_wait_spins: int
    stage_clock: bool
    quant: WeightQuant | None = None  # the projections' quantization (None: stored in ``dtypes.weights``)
    draft_probs: bool = False  # a verify band's step takes the proposer's distributions (``Sampling.draft_probs``)
    tensor_parallel: int = 1  # the ranks the model is split over (``monobuild.parallel``); a package serves each

    def to_json(self) -> dict:
        out = asdict(self)
        out["bands"], out["modes"] = [asdict(b) for b in self.bands], list(self.modes)
        return out

    @staticmethod
    def from_json(data: dict) -> PackageDeployment:
        data = dict(data)
        data["dtypes"] = DtypeRoles(**data["dtypes"])
        data["kv_cache"] = KVLayout(**data["kv_cache"])
        data["bands"] = tuple(Band(**b) for b in data["bands"])
        data["modes"] = tuple(data["modes"])
        if data.get("quant") is not None:
            data["quant"] = WeightQuant(**data["quant"])
        return PackageDeployment(**data)
