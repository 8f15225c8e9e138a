"""The programs around the layers as op lists: the embedding (one op), and the head: [norm],
logits and, for a greedy head, argmax (with a verify band's greedy verdict), for a sampling head
sample."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema import Arg, DtypeRoles, Region
from ..geometry import next_pow2
from . import parallel
from .dense import region_arg, tensor, x_hat
from .spec import CrossRank, Need, Op, WeightStream

CTA_LOCAL = "cta-local: each CTA reads back only the logits tiles it wrote, after a CTA barrier"
HELD_LOCAL = "cta-local: each sample task writes and reads back only its token row's list, between CTA barriers"
#: a sampling head's per-row inputs: the engine's device tensors, read in place
SAMPLING_INPUTS = (("temperature", "fp32"), ("top_k", "i32"), ("top_p", "fp32"), ("seed", "i64"))
VERDICT_ROUND = 2  # the verdict's uniforms' Philox round (the correction's the next): after the draw's 0 and 1
#: a sampled verify band's token rows' parts of the verdict (kernels/sample.sample_op → verdict_op)
VERDICT_PARTS = ("token_emit", "token_keep")


@dataclass(frozen=True)
class HeadShape:
    hidden: int
    vocab: int
    m: int
    dtypes: DtypeRoles
    w_bytes: int
    grid: int
    block_n: int
    x_parts: int  # the split-K partials the last layer leaves the hidden state in
    greedy: bool
    norm_stage: bool
    params: tuple[tuple[str, object], ...]
    tokens: int = 1  # tokens per row: above 1, a speculative verify band (its greedy head returns the verdict)
    sampled: bool = False  # the head samples each row's id (per-row temperature, top-k, top-p, seed)
    draft_probs: bool = False  # a sampled verify band's verdict takes the proposer's distributions of its drafts
    ranks: int = 1  # tensor parallelism: the ranks the vocabulary is split over (``vocab`` is one rank's rows)
    vocab_whole: int = 0  # the model's vocabulary, which a split logits or sampling head gathers its ranks' rows into

    @property
    def gathered(self) -> bool:
        """A logits or sampling head over a split vocabulary: each rank's logits op writes its rows
        (``logits_part``), which every rank gathers into the whole vocabulary's ``logits`` (and, to
        sample, the whole vocabulary's tile parts). A greedy head's argmax reduces the ranks' own
        tile maxima instead (``ranks_argmax_op``)."""
        return self.ranks > 1 and (self.sampled or not self.greedy)

    @property
    def tiles(self) -> int:
        return -(-self.vocab // self.block_n)

    @property
    def out_vocab(self) -> int:
        """The ids the head's logits and its argmax or sampler span: a rank's rows, or the whole
        vocabulary where it is gathered."""
        return self.vocab_whole if self.gathered else self.vocab

    @property
    def out_tiles(self) -> int:
        """The tiles whose parts the argmax or sampler reads (of ``out_vocab``)."""
        return -(-self.out_vocab // self.block_n)

    @property
    def sample_tiles_p(self) -> int:
        """The sampler's tiles rounded up to a power of two."""
        return next_pow2(self.out_tiles)


def embed_ops(m: int, hidden: int, block: int, x_parts: int, grid: int, w_dtype: str, w_bytes: int, ranks: int = 1,
              vocab_rows: int = 0) -> tuple[Op, ...]:
    """The embedding: a row gather; under tensor parallelism (``ranks`` > 1) of the rank's
    ``vocab_rows`` rows into its partial, then the all-reduce of the ranks' partials."""
    regions = parallel.reduced(Region("x_out", "io", "fp32", (x_parts, m, hidden), "embed", ()), ranks)
    out = regions[0]
    split = ranks > 1
    embed = parallel.signalling(Op(
        "embed", "embed_op", None, m * -(-hidden // block),
        f"(token row, {block} columns): gather an embedding row" + (" (the rank's rows; other ids read zeros)"
                                                                    if split else ""),
        (("tokens", tensor("tokens", "i32", "step_input")), ("embed", tensor("embed", w_dtype, "model_weight")),
         ("x_out", region_arg(out)), ("vocab_start", Arg("vocab_start", "i32", "rank") if split else None),
         ("M", m), ("H", hidden), ("BH", block), ("X_PARTS", x_parts), ("V_RANK", vocab_rows if split else 0),
         ("G", grid)),
        writes=(out,), reads=(), needs=(), io_bytes=m * hidden * (w_bytes + 4), band_args=("M", "G")),
        parallel.SITE_EMBED, ranks)
    if not split:
        return (embed,)
    return embed, parallel.reduce_op("reduce_embed", out, None, regions[1], parallel.SITE_EMBED, ranks, grid,
                                     next_pow2(hidden))


def head_regions(s: HeadShape) -> dict[str, Region]:
    logits_in = "norm" if s.norm_stage else "logits"
    parts = "gather" if s.gathered else "logits"  # the op that writes the logits the ids are decided from
    regions = [Region("x_in", "io", "fp32", (s.x_parts, s.m, s.hidden), None, ()),
               Region("logits", "io", "fp32", (s.m, s.out_vocab), parts, (), CTA_LOCAL if s.greedy else None),
               x_hat("x_hat", logits_in, "logits", s.dtypes.activations, s.m, s.hidden, s.grid, s.norm_stage)]
    if s.gathered:
        regions.append(Region("logits_part", "scratch", "fp32", (s.m, s.vocab), "logits", ()))
    if s.sampled:  # each tile's part of the rows' first draw (kernels/head._first_draw)
        regions += [Region(name, "scratch", dtype, (s.m, s.out_tiles), parts, ())
                    for name, dtype in (("tile_z", "fp32"), ("tile_zarg", "i32"), ("tile_mass", "fp32"))]
        # each token row's list of the tiles a pass of its draw walks (kernels/allowed.walk_first)
        regions.append(Region("held_tiles", "scratch", "i32", (s.m, s.sample_tiles_p), "sample", (), HELD_LOCAL))
    if s.greedy:
        regions += [Region("tile_max", "scratch", "fp32", (s.m, s.out_tiles), parts, ()),
                    Region("tile_arg", "scratch", "i32", (s.m, s.out_tiles), parts, ()),
                    Region("next_ids", "io", "i32", (s.m,), "sample" if s.sampled else "argmax", ())]
        if s.tokens > 1:  # the verdict: the argmax's, or a sampling head's from its token rows' parts
            decides = "verdict" if s.sampled else "argmax"
            regions += [Region("accepted", "io", "i32", (s.m // s.tokens,), decides, ()),
                        Region("emitted", "io", "i32", (s.m // s.tokens, s.tokens), decides, ())]
            if s.sampled:
                regions += [Region(name, "scratch", "i32", (s.m,), "sample", ()) for name in VERDICT_PARTS]
    return {r.name: r for r in regions}


def head_ops(s: HeadShape) -> tuple[Op, ...]:
    p = dict(s.params)
    r = head_regions(s)
    arg = {name: region_arg(region) for name, region in r.items()}
    h, wb = s.hidden, s.w_bytes
    final_norm = tensor("final_norm", s.dtypes.weights, "model_weight")
    ops = []
    if s.norm_stage:
        ops.append(Op("norm", "norm_op", None, s.m, "(token row): x̂ = RMSNorm(x), read by every logits task",
                      (("x_ptr", arg["x_in"]), ("X_PARTS", s.x_parts), ("norm_ptr", final_norm),
                       ("x_hat_ptr", arg["x_hat"]), ("M", s.m), ("K", h), ("K_P", p["H_P"]), ("EPS", p["EPS"]),
                       ("G", s.grid)),
                      writes=(r["x_hat"],), reads=("x_in",), needs=(Need("x_in", "whole rows"),),
                      weights=(WeightStream("final_norm", 1, h, wb),), after_previous_launch=True))
    x = "x_hat" if s.norm_stage else "x_in"
    greedy = (("tile_max", arg["tile_max"]), ("tile_arg", arg["tile_arg"])) if s.greedy else (("tile_max", None),
                                                                                            ("tile_arg", None))
    draw = ("tile_z", "tile_zarg", "tile_mass")
    sampling = {n: tensor(n, dtype, "step_input") for n, dtype in SAMPLING_INPUTS}
    positions = tensor("positions", "i32", "step_input")
    first_draw = tuple((n, arg[n] if s.sampled else None) for n in draw) + tuple(
        (n, v if s.sampled else None) for n, v in (("positions", positions), ("temperature", sampling["temperature"]),
                                                   ("seed", sampling["seed"])))
    # the tiles' parts come from the logits op, or, where the vocabulary is gathered, from the gather
    parts_here, sampled_here = s.greedy and not s.gathered, s.sampled and not s.gathered
    logits_bindings = (*(greedy if parts_here else (("tile_max", None), ("tile_arg", None))),
                       *(first_draw if sampled_here else tuple((n, None) for n, _ in first_draw)),
                       ("vocab_valid", Arg("vocab_valid", "i32", "rank") if s.ranks > 1 and parts_here else None),
                       ("SAMPLED", sampled_here))
    ops.append(parallel.signalling(Op(
        "logits", "logits_op", "gemv_prefetch", s.tiles,
        f"{'x̂' if s.norm_stage else 'RMSNorm(x)'} · W_head rows (tiles of {s.block_n}), fp32 logits",
        (("x_ptr", arg[x]), ("X_PARTS", 1 if s.norm_stage else s.x_parts), ("norm_ptr", final_norm),
         ("x_hat_ptr", arg["x_hat"]), ("w_ptr", tensor("w_head", s.dtypes.weights, "model_weight")),
         ("w2_ptr", None), ("w3_ptr", None), ("SEGMENTS", 1), ("SEG1", s.vocab), ("SEG2", s.vocab),
         ("logits", arg["logits_part" if s.gathered else "logits"]), *logits_bindings, ("M_P", next_pow2(s.m)),
         ("TOKENS", s.tokens),
         ("V", s.vocab), ("N", s.vocab), ("K", h), ("K_P", p["H_P"]),
         ("M", s.m), ("ROWS_P", p["ROWS_P"]), ("BN", s.block_n), ("BK", p["BK"]), ("SPLIT", 1), ("G", s.grid),
         ("EPS", p["EPS"]), ("NORM", not s.norm_stage), ("GREEDY", parts_here), ("GATED", False), ("INTER", 0),
         ("DOT_IEEE", p["DOT_IEEE"]), ("W_STAGES", p["W_STAGES"]), ("NORM_ROWS", p["NORM_ROWS"])),
        writes=(r["logits_part" if s.gathered else "logits"],) + ((r["tile_max"], r["tile_arg"]) if parts_here else ())
        + (tuple(r[n] for n in draw) if sampled_here else ())
        + (() if s.norm_stage else (r["x_hat"],)),
        reads=(x,) + (("logits",) if parts_here else ()) + (() if s.norm_stage else ("x_hat",)),
        needs=(Need(x, "every row's K columns" if s.norm_stage else "whole rows (each CTA norms them)"),),
        weights=(WeightStream("w_head", s.vocab, h, wb, s.block_n),)
        + (() if s.norm_stage else (WeightStream("final_norm", 1, h, wb),)),
        io_bytes=0 if s.gathered else s.m * s.vocab * 4, after_previous_launch=not s.norm_stage), parallel.SITE_LOGITS,
        s.ranks))
    if s.gathered:
        ops.append(Op("gather", "gather_op", None, s.out_tiles,
                      f"(tile of {s.block_n} ids, every row): logits = every rank's logits_part side by side, less "
                      "the vocabulary's padding" + ("; then the tile's parts, as the logits op's" if s.greedy else ""),
                      (*parallel.peer_args("peer", "logits_part", "fp32", s.ranks), ("logits", arg["logits"]),
                       *greedy, *first_draw, ("M", s.m), ("V_RANK", s.vocab), ("VOCAB", s.vocab_whole),
                       ("ROWS_P", p["ROWS_P"]), ("BN", s.block_n), ("RANKS", s.ranks), ("G", s.grid),
                       ("PARTS", s.greedy), ("SAMPLED", s.sampled), ("M_P", next_pow2(s.m)), ("TOKENS", s.tokens),
                       *((k, v) for k, v in parallel.sync_bindings(s.ranks) if k in ("tp_counters", "rank"))),
                      writes=(r["logits"],) + ((r["tile_max"], r["tile_arg"]) if s.greedy else ())
                      + (tuple(r[n] for n in draw) if s.sampled else ()),
                      reads=("logits_part",) + (("logits",) if s.greedy else ()),
                      needs=(Need("logits_part", "every CTA's tiles of this rank"),),
                      io_bytes=s.m * (s.ranks * s.vocab + s.vocab_whole) * 4,
                      peer_wait=CrossRank(parallel.SITE_LOGITS, s.ranks)))
    rows, verify = s.m // s.tokens, s.tokens > 1 and s.greedy  # a logits head returns no verdict
    drafts = tensor("tokens", "i32", "step_input") if verify else None  # token j + 1 is the draft after j
    verdict = (("tokens", drafts), ("accepted", arg["accepted"] if verify else None),
               ("emitted", arg["emitted"] if verify else None))
    verdict_regions = (r["accepted"], r["emitted"]) if verify else ()
    verdict_bytes = rows * (s.tokens + 1) * 4 + s.m * 4 if verify else 0
    if s.sampled:
        # the proposer's distributions, [rows, drafts, vocab] fp32; a token row's verdict reads one
        # probability of its draft's, and where it rejects the draft the whole distribution: a row's
        # bytes that must move are one distribution's, at its first rejection
        q = tensor("draft_probs", "fp32", "step_input") if s.draft_probs else None
        parts = tuple(r[n] for n in VERDICT_PARTS) if verify else ()
        ops.append(Op("sample", "sample_op", None, s.m,
                      "(token row): its id drawn from softmax(logits / temperature) within its row's top-k and top-p "
                      f"(greedy where temperature is 0){' and its part of the verdict' if verify else ''}",
                      (("logits", arg["logits"]), ("tile_max", arg["tile_max"]), ("tile_arg", arg["tile_arg"]),
                       *((n, arg[n]) for n in draw), ("held_tiles", arg["held_tiles"]), ("next_ids", arg["next_ids"]),
                       ("positions", positions), *sampling.items(), ("tokens", drafts),
                       *((n, arg[n] if verify else None) for n in VERDICT_PARTS), ("draft_probs", q),
                       ("DRAFT_PROBS", s.draft_probs), ("V", s.out_vocab), ("M", s.m), ("BN", s.block_n),
                       ("TILES_P", s.sample_tiles_p),
                       ("G", s.grid), ("TOKENS", s.tokens), ("VERDICT_ROUND", VERDICT_ROUND)),
                      writes=(r["next_ids"], r["held_tiles"], *parts),
                      reads=("tile_max", "tile_arg", *draw, "logits", "held_tiles"),
                      needs=(*(Need(n, "the token row's tiles") for n in ("tile_max", "tile_arg", *draw)),
                             Need("logits", "the token row's logits")),
                      io_bytes=s.m * 4 * (1 + len(parts) + verify) + (rows * s.out_vocab * 4 if s.draft_probs else 0)))
        if verify:
            ops.append(Op("verdict", "verdict_op", None, rows,
                          "(row): the verdict, the drafts kept up to the first its token rows reject",
                          (*((n, arg[n]) for n in VERDICT_PARTS), ("accepted", arg["accepted"]),
                           ("emitted", arg["emitted"]), ("M", s.m), ("G", s.grid), ("TOKENS", s.tokens),
                           ("T_P", next_pow2(s.tokens))),
                          writes=verdict_regions, reads=VERDICT_PARTS,
                          needs=tuple(Need(n, "the row's token rows") for n in VERDICT_PARTS),
                          io_bytes=s.m * 4 * len(VERDICT_PARTS) + rows * (s.tokens + 1) * 4))
    elif s.greedy and s.ranks > 1:
        ops.append(Op("argmax", "ranks_argmax_op", None, rows,
                      f"(row): reduce every rank's tile maxima to the greedy id{'s and the verdict' if verify else ''}",
                      (*parallel.peer_args("tile_max", "tile_max", "fp32", s.ranks),
                       *parallel.peer_args("tile_arg", "tile_arg", "i32", s.ranks), ("next_ids", arg["next_ids"]),
                       *verdict, ("V", s.vocab), ("M", s.m), ("BN", s.block_n), ("TILES_P", p["TILES_P"]),
                       ("G", s.grid), ("TOKENS", s.tokens), ("T_P", next_pow2(s.tokens)), ("RANKS", s.ranks),
                       *((k, v) for k, v in parallel.sync_bindings(s.ranks) if k in ("tp_counters", "rank"))),
                      # this rank's own tile parts, read with the peers': in a persistent program an
                      # edge from the logits op, whose count the cross-rank wait takes
                      writes=(r["next_ids"], *verdict_regions), reads=("tile_max", "tile_arg"),
                      needs=(Need("tile_max", "every CTA's tiles of this rank"),
                             Need("tile_arg", "every CTA's tiles of this rank")),
                      io_bytes=s.m * 4 * (1 + 2 * s.ranks * s.tiles) + verdict_bytes,
                      peer_wait=CrossRank(parallel.SITE_LOGITS, s.ranks)))
    elif s.greedy:
        ops.append(Op("argmax", "argmax_op", None, rows,
                      f"(row): reduce tile maxima to the greedy id{'s and the verdict' if verify else ''}",
                      (("tile_max", arg["tile_max"]), ("tile_arg", arg["tile_arg"]), ("next_ids", arg["next_ids"]),
                       *verdict, ("V", s.vocab), ("M", s.m), ("BN", s.block_n), ("TILES_P", p["TILES_P"]),
                       ("G", s.grid), ("TOKENS", s.tokens), ("T_P", next_pow2(s.tokens))),
                      writes=(r["next_ids"], *verdict_regions), reads=("tile_max", "tile_arg"),
                      needs=(Need("tile_max", "the row's tiles"), Need("tile_arg", "the row's tiles")),
                      io_bytes=s.m * 4 + verdict_bytes))
    return tuple(ops)
