"""The stage-synchronous floor: a program that moves a step's bytes through the same launches,
grids and sync edges as the real one, and does nothing else.

``monobuild bench --floor`` times it beside the decode step. The roofline counts only bytes; the
real program also pays for its structure (a launch per layer, a grid-wide sync edge between
stages, every CTA ramping its memory pipeline up at each stage and draining it at the end). This
program keeps the structure and drops everything else (no arithmetic, no activations, no
indirection, each stage's bytes spread evenly over the CTAs in contiguous 16-byte-aligned
chunks), so its time is what the structure alone costs, and the gap between the two is what the
stages' own work loses. Like the real stages, each of its stages starts loading after its wait: a
real program could beat it only by streaming a stage's bytes before that stage's wait (the
register double-buffer loads one weight chunk there), and none measured has.
"""

import triton
import triton.language as tl

from .common import signal, step_epoch, wait


@triton.jit
def floor_kernel(src, stage_chunks, counters, sink, S, G: tl.constexpr, CHUNK: tl.constexpr, PDL: tl.constexpr,
                 W_STAGES: tl.constexpr):
    """Stream S stages back to back: stage s reads ``stage_chunks[s]`` chunks of CHUNK int32 from
    ``src`` (each stage the chunks after the previous one's), chunk c on CTA c mod G, through a
    software pipeline W_STAGES deep; between stages the layer program's sync edge (signal, then
    wait on counter s). With PDL, the launch waits for its predecessor before its first load and
    releases its successor as its last stage starts, as the layer program does. Each CTA's sum of
    its chunks goes to ``sink`` so that no load is dead.
    """
    pid = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], tl.int32)
    if PDL:
        tl.extra.cuda.gdc_wait()
    target = (step_epoch(counters, G) + 1) * G
    # The stage's first chunk: offsets stay multiples of CHUNK, so the loads stay 16-byte vectors.
    first = tl.zeros([], tl.int64)
    for s in range(S):
        if s > 0:
            if PDL and s == S - 1:
                tl.extra.cuda.gdc_launch_dependents()
            wait(counters + s - 1, target, counters, 0, 0)
        chunks = tl.load(stage_chunks + s)
        for c in tl.range(pid, chunks, G, num_stages=W_STAGES):
            acc += tl.load(src + (first + c) * CHUNK + offs)
        first += chunks
        if s < S - 1:
            signal(counters + s)
    tl.store(sink + pid * CHUNK + offs, acc)
