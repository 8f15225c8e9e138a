"""The stage-synchronous floor (bench/floor.py): its program moves exactly the chunks each stage
is given, through the sync edges, and compiles to the 16-byte pipelined loads it is meant to time."""

import json
import os
import subprocess
import sys

import pytest

from monobuild.bench.floor import CHUNK_BYTES, FloorLaunch, compile_floor

# Run under the interpreter (CTAs one after another): a grid of one CTA for stages joined by sync
# edges (a wait on a CTA that has not run would never return), several CTAs for one stage. Two
# steps, so the second's waits need the epoch the first left in the counters.
_INTERPRETED = r"""
import json, sys
import torch
from monobuild.compiler.kernels import floor_kernel

CHUNK = 8
grid, stage_chunks, seed = json.loads(sys.argv[1])
gen = torch.Generator().manual_seed(seed)
total = sum(stage_chunks)
src = torch.randint(-1000, 1000, (total + 3, CHUNK), generator=gen, dtype=torch.int32)  # 3 chunks past the end
chunks = torch.tensor(stage_chunks, dtype=torch.int64)
counters = torch.zeros(max(1, len(stage_chunks) - 1), dtype=torch.int64)
sinks = []
for step in range(2):
    sink = torch.full((grid, CHUNK), -7, dtype=torch.int32)  # poisoned: a CTA that stores nothing shows
    floor_kernel[(grid,)](src, chunks, counters, sink, len(stage_chunks), G=grid, CHUNK=CHUNK, PDL=False,
                          W_STAGES=3)
    sinks.append(sink.tolist())
expected = [src[:total][c::grid].sum(0).tolist() for c in range(grid)]
print(json.dumps({"sinks": sinks, "expected": expected, "counters": counters.tolist()}))
"""


@pytest.mark.parametrize("grid,stage_chunks", [(1, [3, 0, 5, 2]), (3, [7]), (4, [2])])
def test_the_floor_program_reads_each_stages_chunks_once(grid, stage_chunks):
    env = dict(os.environ, TRITON_INTERPRET="1")
    case = [grid, stage_chunks, int.from_bytes(os.urandom(4), "little")]
    proc = subprocess.run([sys.executable, "-c", _INTERPRETED, json.dumps(case)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["sinks"][0] == out["expected"] and out["sinks"][1] == out["expected"]
    edges = len(stage_chunks) - 1
    assert out["counters"] == ([2 * grid] * edges if edges else [0])  # each CTA signals each edge once a step


@pytest.mark.parametrize("pdl,cooperative", [(True, True), (False, False)])
def test_the_floor_program_streams_16_byte_pipelined_loads_without_a_stack(pdl, cooperative):
    code = compile_floor(FloorLaunch("per_layer", "layer", 132, 1, 4, pdl, cooperative, (3, 4)), "sm_90", 4)
    ptx = code.ir_text("ptx")
    assert code.resources.stack_bytes == 0 and code.resources.spill_bytes == 0
    # a thread's share of a 16 KB chunk is 8 × 16 B, three chunks ahead plus the one in use
    assert ptx.count("cp.async.cg.shared.global [") == 4 * CHUNK_BYTES // (128 * 16)
    assert ("griddepcontrol.wait" in ptx) == pdl and ("griddepcontrol.launch_dependents" in ptx) == pdl


@pytest.mark.parametrize("pdl", [True, False])
def test_the_streaming_floor_puts_its_first_copies_in_flight_before_any_wait(pdl):
    """The streaming variant's point: a CTA's first W_STAGES − 1 chunks are copied before the
    launch's griddepcontrol.wait and before its first sync edge's acquire, in 16-byte copies."""
    code = compile_floor(FloorLaunch("streaming", "layer", 132, 1, 4, pdl, pdl, (3, 0, 4)), "sm_90", 4)
    ptx = code.ir_text("ptx")
    assert code.resources.stack_bytes == 0 and code.resources.spill_bytes == 0
    first_wait = ptx.index("ld.global.gpu.acquire")
    if pdl:
        first_wait = min(first_wait, ptx.index("griddepcontrol.wait"))
    copies = ptx.count("cp.async.cg.shared.global [")
    ahead = ptx[:first_wait].count("cp.async.cg.shared.global [")
    assert ahead == 3 * CHUNK_BYTES // (128 * 16)  # three chunks, 8 × 16 B a thread each
    assert copies == ahead + CHUNK_BYTES // (128 * 16)  # and the loop's one chunk an iteration
    assert ptx.count("cp.async.commit_group") >= 4


@pytest.mark.gpu
@pytest.mark.parametrize("grid,stage_chunks,depth", [(8, [3, 0, 21, 2, 8], 4), (5, [1], 6), (16, [40, 7, 0], 3)])
def test_the_streaming_floor_reads_each_stages_chunks_once(grid, stage_chunks, depth):
    """On a GPU (Gluon kernels do not run under the interpreter): every CTA sums exactly the
    chunks c ≡ CTA (mod grid) of every stage, over two steps (the second's targets come from the
    epoch the first left), with stages that give a CTA nothing and copies running across them."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from monobuild.compiler.kernels import floor_streaming_kernel

    chunk = 512
    total = sum(stage_chunks)
    src = torch.randint(-1000, 1000, (total + 3, chunk), dtype=torch.int32, device="cuda")  # 3 chunks past the end
    chunks = torch.tensor(stage_chunks, dtype=torch.int64, device="cuda")
    counters = torch.zeros(max(1, len(stage_chunks) - 1), dtype=torch.int64, device="cuda")
    firsts = [sum(stage_chunks[:s]) for s in range(len(stage_chunks))]  # stage s's chunk c is src[first + c]
    expected = torch.zeros(grid, chunk, dtype=torch.int64, device="cuda")
    for first, n in zip(firsts, stage_chunks):
        for c in range(n):
            expected[c % grid] += src[first + c]
    expected = expected.to(torch.int32)
    for _ in range(2):
        sink = torch.full((grid, chunk), -7, dtype=torch.int32, device="cuda")  # poisoned
        floor_streaming_kernel[(grid,)](src, chunks, counters, sink, len(stage_chunks), G=grid, CHUNK=chunk,
                                        PDL=False, W_STAGES=depth, num_warps=4)
        torch.cuda.synchronize()
        assert torch.equal(sink, expected)
    edges = len(stage_chunks) - 1
    assert counters.tolist() == ([2 * grid] * edges if edges else [0])


def test_an_amd_target_times_only_the_floors_it_has():
    """The streaming floor is written for NVIDIA GPUs (cp.async), so an AMD package's bench times
    the two stage-synchronous floors only."""
    from monobuild.bench.floor import VARIANTS, target_variants

    assert target_variants("sm_90") == VARIANTS
    assert target_variants("gfx942") == target_variants("gfx950") == ("per_layer", "one_launch")
