"""Run under ``TRITON_INTERPRET=1`` by ``test_sampler.py``: the sampling head's device functions
over a vocabulary of many tiles, given fp32 logits (no GEMV in front of them).

The logits op's per-tile work (``head.tile_parts``, one program a tile), then the sample op
(``sample.sample_op``, one program a token row) and in a verify band the verdict op
(``sample.verdict_op``, one program a row), on fresh random logits; prints each row's id and the
float64 reference's (``bench.reference.sample_reference``, the same uniforms) with its margin.
With ``tokens`` > 1 the rows are a verify band's, their drafts' distributions given (the sample
op's DRAFT_PROBS verdict), and it also prints each row's verdict and
``bench.reference.proposal_verdict``'s. With ``threshold`` it also prints each row's allowed
set as the verdict's threshold search finds it (``allowed.allowed_threshold``: its threshold and
the set's mass) and ``bench.reference.allowed_distribution``'s.
"""

import json
import sys

import numpy as np
import torch
import triton
import triton.language as tl

from monobuild.bench.reference import allowed_distribution, proposal_verdict, sample_reference
from monobuild.compiler.kernels.allowed import allowed_threshold, tile_maxima, tiles_floor
from monobuild.compiler.kernels.head import tile_parts
from monobuild.compiler.kernels.sample import _draw, sample_op, verdict_op
from monobuild.compiler.ops.head import VERDICT_ROUND


@triton.jit
def parts_kernel(logits, tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg, tile_mass,
                 V: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr, M_P: tl.constexpr,
                 TOKENS: tl.constexpr):
    tile_parts(logits, tl.program_id(0), tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg,
               tile_mass, None, V, M, ROWS_P, BN, True, M_P, TOKENS)


@triton.jit
def sample_kernel(logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held_tiles, next_ids, positions,
                  temperature, top_k, top_p, seed, tokens, token_emit, token_keep, draft_probs,
                  DRAFT_PROBS: tl.constexpr, V: tl.constexpr, M: tl.constexpr, BN: tl.constexpr,
                  TILES_P: tl.constexpr, TOKENS: tl.constexpr, VERDICT_ROUND: tl.constexpr):
    sample_op(tl.program_id(0), None, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held_tiles, next_ids,
              positions, temperature, top_k, top_p, seed, tokens, token_emit, token_keep, draft_probs, DRAFT_PROBS, V,
              M, BN, TILES_P, M, TOKENS, VERDICT_ROUND)


@triton.jit
def verdict_kernel(token_emit, token_keep, accepted, emitted, M: tl.constexpr, TOKENS: tl.constexpr,
                   T_P: tl.constexpr):
    verdict_op(tl.program_id(0), None, token_emit, token_keep, accepted, emitted, M, M // TOKENS, TOKENS, T_P)


@triton.jit
def threshold_kernel(logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held_tiles, temperature, top_k, top_p,
                     tau, mass, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    m = tl.program_id(0)
    temp, k, p = tl.load(temperature + m), tl.load(top_k + m), tl.load(top_p + m)
    held_list = held_tiles + m * TILES_P
    _, best, total, _, _, _ = _draw(m, logits, held_list, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, temp, p, k,
                                    0, 0, V, BN, TILES_P)
    vals = tile_maxima(tile_max, m, V, BN, TILES_P)
    inv_t = 1.0 / temp
    floor, norm = allowed_threshold(logits + m * V, held_list, vals,
                                    tiles_floor(vals, tl.exp((vals - best) * inv_t), best, total, k, p), best, inv_t,
                                    total, k, p, V, BN, TILES_P)
    tl.store(tau + m, floor)
    tl.store(mass + m, norm)


def allowed_sets(logits: torch.Tensor, settings: list, parts: tuple, vocab: int, bn: int, tiles_p: int) -> dict:
    """Each row's allowed set by ``allowed_threshold`` (as the ids at or above its threshold, and
    its mass relative to the reference's) beside ``allowed_distribution``'s, with its margin."""
    rows = len(settings)
    tau, mass = torch.full((rows,), float("nan")), torch.full((rows,), float("nan"))
    held = torch.full((rows, tiles_p), -1, dtype=torch.int32)  # poisoned: each pass lists its tiles first
    threshold_kernel[(rows,)](logits, *parts, held, torch.tensor([s[0] for s in settings], dtype=torch.float32),
                              torch.tensor([s[1] for s in settings], dtype=torch.int32),
                              torch.tensor([s[2] for s in settings], dtype=torch.float32), tau, mass, V=vocab, BN=bn,
                              TILES_P=tiles_p)
    out = {"set_equal": [], "mass_error": [], "set_margins": [], "set_sizes": []}
    for b, (temperature, top_k, top_p) in enumerate(settings):
        row = logits[b].double().numpy()
        p, margin = allowed_distribution(row, temperature, top_k, top_p)
        wanted = p > 0
        w = (row - row.max()) / temperature
        out["set_equal"].append(bool(((row >= float(tau[b])) == wanted).all()))
        out["mass_error"].append(abs(float(mass[b]) / float(np.exp(w[wanted]).sum()) - 1))
        out["set_margins"].append(margin)
        out["set_sizes"].append(int(wanted.sum()))
    return out


def main(case: dict) -> dict:
    gen = torch.Generator().manual_seed(case["seed"])
    settings, t = case["settings"], case.get("tokens", 1)
    rows, vocab, bn = len(settings), case["vocab"], case["block_n"]
    m = rows * t
    tiles = -(-vocab // bn)
    tiles_p = triton.next_power_of_2(tiles)
    logits = torch.randn(m, vocab, generator=gen) * case["scale"]
    for b, at in enumerate(case["peaks"]):  # each row's likeliest ids in tiles of their own
        logits[b * t: (b + 1) * t, at: at + 40] += case["scale"] * 2
    for b in case.get("bf16_rows", []):  # logits of bf16's precision: many ids tie
        logits[b * t: (b + 1) * t] = logits[b * t: (b + 1) * t].bfloat16().float()
    positions = torch.randint(0, 4096, (m,), generator=gen, dtype=torch.int32)
    seeds = torch.randint(-2**62, 2**62, (rows,), generator=gen, dtype=torch.int64)
    # a verify band's drafts: each row's first among its likeliest ids, the rest anywhere; its
    # proposals spread over every id
    ids = torch.randint(0, vocab, (m,), generator=gen, dtype=torch.int32)
    if t > 1:
        ids[1::t] = torch.tensor(case["peaks"], dtype=torch.int32) + 3
    q = torch.softmax(torch.randn(rows, max(t - 1, 1), vocab, generator=gen), -1)
    accepted, emitted = torch.full((rows,), -2, dtype=torch.int32), torch.full((m,), -2, dtype=torch.int32)
    temperature = torch.tensor([s[0] for s in settings], dtype=torch.float32)
    top_k = torch.tensor([s[1] for s in settings], dtype=torch.int32)
    top_p = torch.tensor([s[2] for s in settings], dtype=torch.float32)
    nan = lambda dtype: torch.full((m, tiles), float("nan"), dtype=dtype)  # noqa: E731 — poisoned
    tile_max, tile_z, tile_mass = nan(torch.float32), nan(torch.float32), nan(torch.float32)
    tile_arg, tile_zarg = torch.full((m, tiles), -1, dtype=torch.int32), torch.full((m, tiles), -1, dtype=torch.int32)
    next_ids = torch.full((m,), -1, dtype=torch.int32)
    parts_kernel[(tiles,)](logits, tile_max, tile_arg, positions, temperature, seeds, tile_z, tile_zarg, tile_mass,
                           V=vocab, M=m, ROWS_P=max(16, triton.next_power_of_2(m)), BN=bn,
                           M_P=triton.next_power_of_2(m), TOKENS=t)
    token_emit, token_keep = torch.full((m,), -2, dtype=torch.int32), torch.full((m,), -2, dtype=torch.int32)
    held = torch.full((m, tiles_p), -1, dtype=torch.int32)
    sample_kernel[(m,)](logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held, next_ids, positions,
                        temperature, top_k, top_p, seeds, ids, token_emit, token_keep, q, DRAFT_PROBS=t > 1, V=vocab,
                        M=m, BN=bn, TILES_P=tiles_p, TOKENS=t, VERDICT_ROUND=VERDICT_ROUND)
    if t > 1:
        verdict_kernel[(rows,)](token_emit, token_keep, accepted, emitted, M=m, TOKENS=t,
                                T_P=triton.next_power_of_2(t))
    wanted = [sample_reference(logits[n], *settings[n // t], int(seeds[n // t]), int(positions[n]))
              for n in range(m)]
    out = {"ids": next_ids.tolist(), "wanted": [x for x, _ in wanted], "margins": [g for _, g in wanted],
           "argmax": logits.argmax(-1).tolist()}
    if t > 1:
        verdicts = [proposal_verdict(logits[b * t: (b + 1) * t], ids[b * t: (b + 1) * t].tolist(), q[b],
                                     next_ids[b * t: (b + 1) * t].tolist(), *settings[b], int(seeds[b]),
                                     positions[b * t: (b + 1) * t].tolist(), VERDICT_ROUND) for b in range(rows)]
        out.update(accepted=accepted.tolist(), emitted=emitted.view(rows, t).tolist(),
                   verdicts=[v[:2] for v in verdicts], verdict_margins=[v[2] for v in verdicts])
    if case.get("threshold"):
        out.update(allowed_sets(logits, settings, (tile_max, tile_arg, tile_z, tile_zarg, tile_mass), vocab, bn,
                                tiles_p))
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
