"""Run under ``TRITON_INTERPRET=1`` by ``test_sampler.py``: the sampling head's device functions
over a vocabulary of several sampling chunks, given fp32 logits (no GEMV in front of them).

The logits op's per-tile work (``head.tile_parts``, one program a tile) and then the sample op
(``head.sample_op``, one program a row), on fresh random logits; prints each row's id and the
float64 reference's (``bench.reference.sample_reference``, the same uniforms) with its margin.
"""

import json
import sys

import torch
import triton
import triton.language as tl

from monobuild.bench.reference import sample_reference
from monobuild.compiler.kernels.head import sample_op, tile_parts


@triton.jit
def parts_kernel(logits, tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg, tile_mass,
                 V: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr, M_P: tl.constexpr):
    tile_parts(logits, tl.program_id(0), tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg,
               tile_mass, V, M, ROWS_P, BN, True, M_P, 1)


@triton.jit
def sample_kernel(logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, next_ids, positions, temperature, top_k,
                  top_p, seed, V: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr,
                  BV: tl.constexpr, MAX_ROUNDS: tl.constexpr):
    sample_op(tl.program_id(0), None, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, next_ids, positions,
              temperature, top_k, top_p, seed, None, None, None, V, M, BN, TILES_P, M, 1, BV, MAX_ROUNDS)


def main(case: dict) -> dict:
    gen = torch.Generator().manual_seed(case["seed"])
    settings = case["settings"]
    m, vocab, bn, bv, rounds = len(settings), case["vocab"], case["block_n"], case["chunk"], case["max_rounds"]
    tiles = -(-vocab // bn)
    tiles_p = max(triton.next_power_of_2(tiles), bv // bn)
    logits = torch.randn(m, vocab, generator=gen) * case["scale"]
    for b, at in enumerate(case["peaks"]):  # each row's likeliest ids in a chunk of its own
        logits[b, at: at + 40] += case["scale"] * 2
    positions = torch.randint(0, 4096, (m,), generator=gen, dtype=torch.int32)
    seeds = torch.randint(-2**62, 2**62, (m,), generator=gen, dtype=torch.int64)
    temperature = torch.tensor([s[0] for s in settings], dtype=torch.float32)
    top_k = torch.tensor([s[1] for s in settings], dtype=torch.int32)
    top_p = torch.tensor([s[2] for s in settings], dtype=torch.float32)
    nan = lambda dtype: torch.full((m, tiles), float("nan"), dtype=dtype)  # noqa: E731 — poisoned
    tile_max, tile_z, tile_mass = nan(torch.float32), nan(torch.float32), nan(torch.float32)
    tile_arg, tile_zarg = torch.full((m, tiles), -1, dtype=torch.int32), torch.full((m, tiles), -1, dtype=torch.int32)
    next_ids = torch.full((m,), -1, dtype=torch.int32)
    parts_kernel[(tiles,)](logits, tile_max, tile_arg, positions, temperature, seeds, tile_z, tile_zarg, tile_mass,
                           V=vocab, M=m, ROWS_P=max(16, triton.next_power_of_2(m)), BN=bn,
                           M_P=triton.next_power_of_2(m))
    sample_kernel[(m,)](logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, next_ids, positions, temperature,
                        top_k, top_p, seeds, V=vocab, M=m, BN=bn, TILES_P=tiles_p, BV=bv, MAX_ROUNDS=rounds)
    wanted = [sample_reference(logits[b], *settings[b], int(seeds[b]), int(positions[b]), rounds) for b in range(m)]
    return {"ids": next_ids.tolist(), "wanted": [x for x, _ in wanted], "margins": [g for _, g in wanted],
            "argmax": logits.argmax(-1).tolist()}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
