"""What the planner derives from a program's op list, written nowhere else by hand: its stages
(numbered by the ops' places), the regions' writers and readers, the sync edges and their
counters, and the kernel's named ABI (the arguments the ops' functions take, by role)."""

from __future__ import annotations

from dataclasses import replace

from ..schema import Arg, Region, Stage, SyncEdge
from .ops.spec import Op

#: The ABI lists arguments by role, and within a role by region declaration (io, scratch) or by
#: first use in op order (everything else).
ROLE_ORDER = ("io", "layer_weight", "model_weight", "kv_cache", "step_input", "table", "band", "scratch", "sync",
              "debug", "rank", "tp_sync", "peer")
COUNTERS = Arg("counters", "*i64", "sync")
HANG_LOG = Arg("hang_log", "*i64", "debug")
STAGE_CLOCK = Arg("stage_clock", "*i64", "debug")


def stages(ops: tuple[Op, ...], first: int = 0) -> tuple[Stage, ...]:
    """One stage per op; ``first`` is the first op's place in its kind's op list."""
    return tuple(Stage(first + i, op.name, op.tasks, op.task, op.weight_bytes, op.kv_bytes_per_token, op.io_bytes,
                       op.bytes_per_expert) for i, op in enumerate(ops))


def regions(declared: dict[str, Region], ops: tuple[Op, ...]) -> tuple[Region, ...]:
    """The declared regions, in declaration order, with their readers from the ops' reads; a
    region's writer is the op that declares it in ``writes`` (checked: exactly one)."""
    writers: dict[str, str] = {}
    for op in ops:
        for r in op.writes:
            if r.name in writers:
                raise ValueError(f"region {r.name}: written by both {writers[r.name]} and {op.name}")
            if declared[r.name].writer != op.name:
                raise ValueError(f"region {r.name}: declared with writer {declared[r.name].writer}, written by {op.name}")
            writers[r.name] = op.name
    out = []
    for name, r in declared.items():
        readers = tuple(op.name for op in ops if name in op.reads)
        out.append(replace(r, readers=readers))
    return tuple(out)


def _hazard(earlier: Op, later: Op) -> bool:
    """Whether ``later`` must not start before ``earlier`` has finished on every CTA: it reads what
    earlier writes (C1), or writes what earlier reads or writes (C2), unless the region says the
    accesses are disjoint or CTA-local (``same_stage``: then the op pair needs no edge either)."""
    written = {r.name: r for r in earlier.writes}
    later_writes = {r.name for r in later.writes}
    for name in set(later.reads) | later_writes:
        if name in written and not written[name].same_stage:
            return True
    return any(name in later_writes for name in earlier.reads if name not in written)


def edges(ops: tuple[Op, ...], grid: int) -> tuple[SyncEdge, ...]:
    """The sync edges a persistent program needs: every pair of ops in a hazard is joined by a
    chain of edges between consecutive ops (release/acquire is cumulative). Counter k is the k-th
    edge; each orders the regions its producer writes and its consumer reads."""
    needed = set()
    for j, later in enumerate(ops):
        for k, earlier in enumerate(ops[:j]):
            if _hazard(earlier, later):
                needed.update(range(k + 1, j + 1))
    out = []
    for j in sorted(needed):
        producer, consumer = ops[j - 1], ops[j]
        ordered = tuple(r.name for r in producer.writes if r.kind == "scratch" and r.name in consumer.reads)
        out.append(SyncEdge(len(out), producer.name, consumer.name, ordered, grid))
    return tuple(out)


def abi(ops: tuple[Op, ...], declared: dict[str, Region], *, counters: bool, hang_log: bool,
        stage_clock: bool) -> tuple[Arg, ...]:
    """The program's kernel arguments: every Arg its ops bind, then the driver's own."""
    args: dict[str, Arg] = {}
    for op in ops:
        for a in op.args:
            if args.setdefault(a.name, a) != a:
                raise ValueError(f"argument {a.name}: bound as {args[a.name]} and as {a} by {op.name}")
    region_order = {name: i for i, name in enumerate(declared)}
    first_use = {name: i for i, name in enumerate(args)}

    def key(a: Arg):
        within = region_order.get(a.name, 0) if a.role in ("io", "scratch") else first_use[a.name]
        return ROLE_ORDER.index(a.role), within

    extra = [a for a, on in ((COUNTERS, counters), (HANG_LOG, hang_log), (STAGE_CLOCK, stage_clock)) if on]
    return tuple(sorted(args.values(), key=key)) + tuple(extra)
