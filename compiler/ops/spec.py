"""An op: one step of a layer (or head) program, as one frozen spec.

A program is an ordered list of ops. Each op says what its tasks are and how they spread over
CTAs, which weights it streams, which regions it reads and writes, the bytes it must move, what
it needs from earlier ops (at the granularity its math needs), and which device functions do its
work. Everything else — the kernel's arguments and the manifest's ABI, the runtime's bindings,
the regions' writers and readers, the sync edges and their counters, stage numbering, clocks —
the planner derives from the list (``compiler/plan.py``), and the driver
(``compiler/kernels/driver.py``) writes the program around the ops' bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schema import Arg, Region


@dataclass(frozen=True)
class WeightStream:
    """A weight tensor an op reads once per step, ``rows`` × ``cols`` elements of ``nbytes`` each,
    in tiles of ``tile_rows`` rows split ``k_split`` ways over the columns (1 × 1: a vector read whole)."""

    tensor: str
    rows: int
    cols: int
    nbytes: int
    tile_rows: int = 1
    k_split: int = 1

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * self.nbytes


@dataclass(frozen=True)
class Need:
    """What an op needs of a region an earlier op writes, at the granularity of its math: a task
    of ``o`` needs only the heads in its K-slice of attn_out, ``down`` only its h columns, an RMSNorm
    whole rows. The Triton executor orders every such need by a whole-stage sync edge; a streaming
    executor may wait for just the part named here."""

    region: str
    part: str


@dataclass(frozen=True)
class CrossRank:
    """A cross-rank site of tensor parallelism (``ops/parallel.py``): its index in the ranks'
    counters, and how many ranks meet there."""

    site: int
    ranks: int


@dataclass(frozen=True)
class Op:
    name: str
    body: str  # the device function (monobuild.compiler.kernels) that does the op's tasks
    prefetch: str | None  # a device function the driver runs before the op's wait (inputs no earlier op writes)
    tasks: int
    task: str  # what one task does
    # The device functions' parameters: each an Arg (a kernel argument) or a constant; the driver
    # passes each function the ones it declares.
    bindings: tuple[tuple[str, Arg | object], ...]
    writes: tuple[Region, ...]  # the regions it writes, declared here (readers are derived)
    reads: tuple[str, ...]  # the regions it reads, by name
    needs: tuple[Need, ...]
    weights: tuple[WeightStream, ...] = ()
    kv_bytes_per_token: int = 0  # KV cache it must read per token of context (all rows of the band)
    io_bytes: int = 0  # other bytes that must move through HBM (KV appends, embeddings, logits)
    bytes_per_expert: int = 0  # weights it reads for each routed expert a step's rows select (routed ops)
    after_previous_launch: bool = False  # reads what the previous launch wrote: the PDL wait goes before it
    releases_next_launch: bool = False  # the next launch may start (PDL) as this op starts
    # Bindings (constants) that a staged program passes at launch instead of writing them into
    # its text, because the op's device functions take them as run-time values: the band's row
    # count, KV splits and grid. Bands whose staged programs then read the same share one code
    # object (``plan.band_generic``).
    band_args: tuple[str, ...] = ()
    # Tensor parallelism (``ops/parallel.py``): the cross-rank site this op signals every rank's
    # counters of after its body (its rank's partial written), and the one it waits on before its
    # body (every rank's partial of that site written); None: neither.
    peer_signal: CrossRank | None = None
    peer_wait: CrossRank | None = None

    @property
    def weight_bytes(self) -> int:
        return sum(w.bytes for w in self.weights)

    @property
    def args(self) -> tuple[Arg, ...]:
        """The kernel arguments the op's functions take, in binding order."""
        return tuple(v for _, v in self.bindings if isinstance(v, Arg))

    def binding(self, name: str):
        return dict(self.bindings)[name]
