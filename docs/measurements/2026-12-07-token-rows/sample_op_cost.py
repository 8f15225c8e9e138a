"""Where a sampled verify band's sample op spends its time: the sampler's device functions
(tests/sampler_worker.py's kernels, compiled here for this GPU) over the logits dump_logits.py
saved, each kernel timed alone (median of 20 launches, CUDA events), one program a token row:
the draws alone (DRAFT_PROBS off, every token row its own row), the draws with the verdicts
(the 2 × 4 band, DRAFT_PROBS on, the drafts' distributions the target's as verify_cost.py's
"target"), and the allowed-set search alone (threshold_kernel), at top-k 50 and top-p 0.9.

    python3 sample_op_cost.py LOGITS.pt
"""

import statistics
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from sampler_worker import parts_kernel, sample_kernel, threshold_kernel  # noqa: E402

from monobuild.compiler.ops.head import SAMPLE_CHUNK, VERDICT_ROUND  # noqa: E402

BN = 64  # the 2 × 4 band's and the 1-row sampling head's vocabulary tile


def timed(kernel, grid: int, *args, **constants) -> float:
    kernel[(grid,)](*args, **constants)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernel[(grid,)](*args, **constants)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(path: str) -> None:
    dev = "cuda"
    for name, (logits, temperature) in torch.load(path).items():
        logits = logits.to(dev)
        m, vocab = logits.shape
        tokens = 4 if m == 8 else 1
        rows = m // tokens
        tiles = -(-vocab // BN)
        tiles_p = max(triton.next_power_of_2(tiles), SAMPLE_CHUNK // BN)
        gen = torch.Generator(device=dev).manual_seed(3)
        positions = torch.arange(1020, 1020 + m, device=dev, dtype=torch.int32)
        ids = torch.randint(0, vocab, (m,), device=dev, dtype=torch.int32, generator=gen)
        q = torch.softmax(logits.view(rows, tokens, vocab)[:, : max(tokens - 1, 1)].double() / temperature, -1).float()
        i32 = lambda n: torch.full((n,), -2, dtype=torch.int32, device=dev)  # noqa: E731
        for label, k, p in (("top-k 50", 50, 1.0), ("top-p 0.9", 0, 0.9)):
            for verdict in ((False, True) if tokens > 1 else (False,)):
                t = tokens if verdict else 1
                r = m // t
                temp = torch.full((r,), temperature, device=dev)
                top_k = torch.full((r,), k, dtype=torch.int32, device=dev)
                top_p = torch.full((r,), p, device=dev)
                seeds = torch.arange(r, device=dev, dtype=torch.int64) + 5
                tile_max, tile_z, tile_mass = (torch.empty(m, tiles, device=dev) for _ in range(3))
                tile_arg, tile_zarg = (torch.empty(m, tiles, dtype=torch.int32, device=dev) for _ in range(2))
                held = torch.empty(m, tiles_p, dtype=torch.int32, device=dev)
                parts_kernel[(tiles,)](logits, tile_max, tile_arg, positions, temp, seeds, tile_z, tile_zarg,
                                       tile_mass, V=vocab, M=m, ROWS_P=max(16, triton.next_power_of_2(m)), BN=BN,
                                       M_P=triton.next_power_of_2(m), TOKENS=t)
                next_ids, emit, keep = i32(m), i32(m), i32(m)
                ms = timed(sample_kernel, m, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held, next_ids,
                           positions, temp, top_k, top_p, seeds, ids, emit, keep, q, DRAFT_PROBS=verdict, V=vocab, M=m,
                           BN=BN, TILES_P=tiles_p, TOKENS=t, BV=SAMPLE_CHUNK, VERDICT_ROUND=VERDICT_ROUND)
                kept = keep.view(r, t)[:, :-1].tolist() if verdict else ""
                print(f"{name} {label}: sample op, {'draws and verdicts' if verdict else 'draws'}: {ms:.3f} ms {kept}",
                      flush=True)
            tau, mass = torch.empty(m, device=dev), torch.empty(m, device=dev)
            temp = torch.full((m,), temperature, device=dev)
            ms = timed(threshold_kernel, m, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held, temp,
                       torch.full((m,), k, dtype=torch.int32, device=dev), torch.full((m,), p, device=dev), tau, mass,
                       V=vocab, BN=BN, TILES_P=tiles_p)
            print(f"{name} {label}: the draw's parts and the search alone: {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
