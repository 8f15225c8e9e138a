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

``floor_streaming_kernel`` is the floor of the program that would: the same stages and edges,
with each CTA's copies running ahead of its waits. It is written in Gluon, Triton's explicit
dialect, since Triton's software pipeliner does not place copies so (docs/PERFORMANCE.md), and
it does not run under the interpreter: its test is on the GPU.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from .sync import signal, step_epoch, wait


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


@gluon.jit
def _issue_chunk(ring, slot, src, stage_chunks, s, j, first, pid, S, G: gl.constexpr, CHUNK: gl.constexpr,
                 layout: gl.constexpr):
    """Put this CTA's next chunk — the j-th of stage s, or of the first later stage that gives it
    one — in flight into ``ring[slot]`` as one copy group (an empty group past its last chunk, so
    that every iteration commits one). Returns where the walk stands after it: (s, j + 1, first),
    first being stage s's first chunk in ``src``."""
    n = gl.load(stage_chunks + s, mask=s < S, other=0)
    while (s < S) & (pid + j * G >= n):  # stages that give this CTA no more chunks
        first += n
        s += 1
        j = 0
        n = gl.load(stage_chunks + s, mask=s < S, other=0)
    offs = gl.arange(0, CHUNK, layout=layout)
    c = (first + pid + j * G) * CHUNK
    live = (offs < CHUNK) & (s < S)  # s < S as a tensor: past its last chunk a CTA reads nothing more
    async_copy.async_copy_global_to_shared(ring.index(slot), src + c + offs, mask=live)
    async_copy.commit_group()
    return s, j + 1, first


@gluon.jit
def floor_streaming_kernel(src, stage_chunks, counters, sink, S, G: gl.constexpr, CHUNK: gl.constexpr,
                           PDL: gl.constexpr, W_STAGES: gl.constexpr):
    """``floor_kernel``'s stages, edges and chunks, with the copies running ahead of the waits:
    W_STAGES − 1 chunks stay in flight a CTA through a ring in shared memory, across stage
    boundaries, and the sync edges order only their use (the sum). It is what a program could
    reach whose next stage's weights stream while it waits (the layer program cannot: Triton's
    pipeliner does not place copies so, docs/PERFORMANCE.md). Written in Gluon, where the copies
    (``cp.async``, one group a chunk) and the ring are explicit; with PDL the first copies go out
    before ``griddepcontrol.wait``, since nothing a previous launch writes is in them.
    """
    WARPS: gl.constexpr = gl.num_warps()
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [WARPS], [0])
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(gl.int32, [W_STAGES, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ps = pid * 0  # the copies' walk: stage, chunk within it, the stage's first chunk in src
    pj = pid * 0
    pfirst = (pid * 0).to(gl.int64)
    for i in gl.static_range(W_STAGES - 1):
        ps, pj, pfirst = _issue_chunk(ring, i, src, stage_chunks, ps, pj, pfirst, pid, S, G, CHUNK, layout)
    if PDL:
        gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    target = (gl.atomic_add(counters, 0, sem="relaxed", scope="gpu") // G + 1) * G
    acc = gl.zeros([CHUNK], gl.int32, layout)
    used = 0  # chunks summed so far: the ring slot of the next is used % W_STAGES
    for s in range(S):
        if s > 0:
            if PDL and s == S - 1:
                gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32,
                                          is_pure=False, pack=1)
            seen = gl.atomic_add(counters + s - 1, 0, sem="acquire", scope="gpu")
            while seen < target:
                seen = gl.atomic_add(counters + s - 1, 0, sem="acquire", scope="gpu")
        n = gl.load(stage_chunks + s)
        for _ in range(gl.cdiv(gl.maximum(n - pid, 0), G)):
            async_copy.wait_group(W_STAGES - 2)  # this chunk's group has landed
            acc += ring.index(used % W_STAGES).load(layout)
            gl.thread_barrier()  # every thread has read the slot the next copy overwrites
            ps, pj, pfirst = _issue_chunk(ring, (used + W_STAGES - 1) % W_STAGES, src, stage_chunks, ps, pj, pfirst,
                                          pid, S, G, CHUNK, layout)
            used += 1
        if s < S - 1:
            gl.thread_barrier()
            gl.atomic_add(counters + s, 1, sem="release", scope="gpu")
    async_copy.wait_group(0)
    gl.store(sink + pid * CHUNK + gl.arange(0, CHUNK, layout=layout), acc)
