"""Tensor parallelism's ops: the all-reduce of a rank's partial, and the cross-rank sync around it.

Under ``tensor_parallel: N`` each rank runs the same programs over its shard (``monobuild.parallel``).
Where a rank's op leaves a partial that every rank needs summed (the embedding's rows, o's and
down's outputs), the op writes it into its own region and *signals* a cross-rank site: after a
CTA barrier, one release add at system scope into every rank's counter for that site and this
rank (``kernels/sync.peer_signal``). The all-reduce op (``reduce_op``) *waits* on its site first:
its target is the count in its own rank's slot (the rank's producer launch has finished, so the
slot holds exactly the signals of every instance of the site so far), and it polls each rank's
slot of its own counters with an acquire at system scope until that count is reached. Then it
adds the residual and every rank's partial, in rank order, reading the peers' regions past the
caches that are not coherent across GPUs (volatile loads on sm_90; on gfx9, vector loads after
the acquire's cache invalidation). Every rank adds the same values in the same
order, so every rank's hidden state is the same bits.

No counter is reset and no rank can run ahead into a partial a peer still reads: a rank writes a
site's partial again only after the next all-reduce of another site, which waited for every
rank's signal of that site, which each rank sends only after its launch of this all-reduce
finished (launches of a rank run in order). So each site needs one region a rank and one counter
per source rank, for every layer and step.
"""

from __future__ import annotations

from dataclasses import replace

from ...parallel import SITE_DOWN, SITE_EMBED, SITE_LOGITS, SITE_O, SITES, SLOTS  # noqa: F401 (the ops' sites)
from ...schema import Arg, Region
from .spec import CrossRank, Need, Op

REDUCE_BLOCK = 512  # hidden columns a reduce task adds


def reduced(region: Region, ranks: int) -> tuple[Region, ...]:
    """``region`` as its writer leaves it: itself; under tensor parallelism the rank's partial
    (``<name>_part``, the same K-split partials) and the all-reduce's sum, ``<name>`` as one
    partial, written by ``reduce_<writer>``."""
    if ranks == 1:
        return (region,)
    part = replace(region, name=region.name + "_part", kind="scratch")
    return part, replace(region, shape=(1, *region.shape[1:]), writer="reduce_" + region.writer)


def peer_args(param: str, buffer: str, dtype: str, ranks: int) -> tuple[tuple[str, Arg | None], ...]:
    """The device functions' SLOTS pointer parameters ``<param>0`` … bound to each rank's copy of
    ``buffer`` (the arguments ``<buffer>_peer<s>``, role ``peer``), None past the ranks."""
    return tuple((f"{param}{s}", Arg(f"{buffer}_peer{s}", "*" + dtype, "peer") if s < ranks else None)
                 for s in range(SLOTS))


def sync_bindings(ranks: int) -> tuple[tuple[str, Arg | None], ...]:
    """What the driver's cross-rank signal and wait take: the rank's own counters, its index and
    every rank's counters."""
    return (("tp_counters", Arg("tp_counters", "*i64", "tp_sync")), ("rank", Arg("rank", "i32", "rank")),
            *peer_args("tp_counters", "tp_counters", "i64", ranks))


def signalling(op: Op, site: int, ranks: int) -> Op:
    """``op``, signalling ``site`` after its body where the model is split over ``ranks``."""
    if ranks == 1:
        return op
    return replace(op, peer_signal=CrossRank(site, ranks), bindings=op.bindings + sync_bindings(ranks))


def reduce_op(name: str, partial: Region, residual: Region | None, out: Region, site: int, ranks: int, grid: int,
              h_p: int, *, io_bytes: int = 0, releases_next_launch: bool = False) -> Op:
    """The all-reduce of ``partial`` (every rank's, summed in rank order) plus ``residual`` (its
    partials; None: none) into ``out``, one partial; tasks are (token row, REDUCE_BLOCK columns)."""
    parts, m, h = partial.shape
    block = min(REDUCE_BLOCK, h_p)
    res = residual.shape[0] if residual is not None else 0
    res_arg = Arg(residual.name, "*fp32", "io" if residual.kind == "io" else "scratch") if residual else None
    out_arg = Arg(out.name, "*fp32", "io" if out.kind == "io" else "scratch")
    return Op(
        name, "reduce_op", None, m * -(-h // block),
        f"(token row, {block} columns): {out.name} = " + (f"{residual.name} + " if residual else "")
        + f"Σ over {ranks} ranks of {partial.name}, in rank order",
        (("residual_ptr", res_arg), ("RES_PARTS", res), *peer_args("peer", partial.name, "fp32", ranks), ("PARTS", parts),
         ("out_ptr", out_arg), ("M", m), ("H", h), ("BH", block), ("RANKS", ranks), ("G", grid),
         *((k, v) for k, v in sync_bindings(ranks) if k in ("tp_counters", "rank"))),
        writes=(out,), reads=(partial.name,) + ((residual.name,) if residual else ()),
        # this rank's own partial, read with the peers' (through its peer argument): in a
        # persistent program an edge from the producer, whose count the cross-rank wait takes
        needs=(Need(partial.name, "every CTA's part of this rank's partial"),)
        + ((Need(residual.name, "the task's columns"),) if residual else ()),
        io_bytes=io_bytes or (ranks * parts + res + 1) * m * h * 4, peer_wait=CrossRank(site, ranks),
        releases_next_launch=releases_next_launch, band_args=("M", "G"))
