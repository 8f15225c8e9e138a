"""Can Gluon (Triton 3.6's explicit dialect) put a stage's weight copies in flight before the
stage's sync wait, with only the activation loads ordered after it? A compile-only probe (CPU,
sm_90), the counterpart of the ninth session's ``pipeliner_probe.py``:

    python gluon_probe.py OUT_DIR      # writes probe.ttgir and probe.ptx, prints the PTX order

One CTA streams CHUNKS weight chunks [BN, BK] of a GEMV into shared memory with ``cp.async``
(one commit group each), then spins on an acquire load of a counter (our ``wait``), then loads
the activation (``ld.global.cg``, as ``load_act`` does) and multiplies chunk c once group c has
landed (``cp.async.wait_group``). The PTX must have every weight copy before the acquire and the
activation load after the acquire loop.

Result (tenth session, Triton 3.6.0): it does. The PTX order is

    cp.async.cg.shared.global ×32 -> ld.global.gpu.acquire.b32 ×2 (the spin) -> ld.global.cg ×4
    -> cp.async.wait_group 3 -> ld.global.cg ×4 -> cp.async.wait_group 2 -> … -> wait_group 0

so the 64 KB of weights are in flight while the CTA waits, and nothing that another CTA writes is
read before the acquire. What it costs: layouts, shared-memory buffers and copy groups are
written by hand (``pipeliner_probe.py`` shows Triton's pipeliner will not place them so), and
``TRITON_INTERPRET=1`` does not run Gluon kernels (it asks for a GPU driver), so such a program
could not be tested on the CPU as the current programs are.
"""
import re
import sys
from pathlib import Path

from triton.backends.compiler import GPUTarget
from triton.compiler import compile as triton_compile
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.ampere import async_copy


@gluon.jit
def probe(w_ptr, x_ptr, out_ptr, counter, target, BN: gl.constexpr, BK: gl.constexpr, CHUNKS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])
    n = gl.arange(0, BN, layout=gl.SliceLayout(1, layout))
    k = gl.arange(0, BK, layout=gl.SliceLayout(0, layout))
    w_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNKS, BN, BK], smem_layout)
    for c in gl.static_range(CHUNKS):  # the weights: in flight before the wait
        async_copy.async_copy_global_to_shared(w_smem.index(c), w_ptr + n[:, None] * (CHUNKS * BK) + c * BK + k[None, :])
        async_copy.commit_group()
    seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")  # the sync edge's wait
    while seen < target:
        seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    acc = gl.zeros([BN], gl.float32, layout=gl.SliceLayout(1, layout))
    for c in gl.static_range(CHUNKS):
        x = gl.load(x_ptr + c * BK + k, cache_modifier=".cg").to(gl.float32)  # the activation: after the wait
        async_copy.wait_group(CHUNKS - 1 - c)
        w = w_smem.index(c).load(layout).to(gl.float32)
        acc += gl.sum(w * x[None, :], axis=1)
    gl.store(out_ptr + n, acc)


src = GluonASTSource(probe, {"w_ptr": "*bf16", "x_ptr": "*bf16", "out_ptr": "*fp32", "counter": "*i32", "target": "i32",
                             "BN": "constexpr", "BK": "constexpr", "CHUNKS": "constexpr"},
                     constexprs={"BN": 32, "BK": 256, "CHUNKS": 4},
                     attrs={(i,): [["tt.divisibility", 16]] for i in range(4)})  # 16-byte aligned pointers
compiled = triton_compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
out = Path(sys.argv[1])
(out / "probe.ttgir").write_text(compiled.asm["ttgir"])
(out / "probe.ptx").write_text(compiled.asm["ptx"])
order = [m.group(0) for m in re.finditer(r"cp\.async\.cg\.shared\.global|cp\.async\.ca\.shared\.global|"
                                         r"ld\.global\.gpu\.acquire[.\w]*|"
                                         r"ld\.global\.cg[.\w]*|cp\.async\.wait_group\s+\d+", compiled.asm["ptx"])]
collapsed = []
for op in order:
    op = " ".join(op.split())
    if collapsed and collapsed[-1][0] == op:
        collapsed[-1][1] += 1
    else:
        collapsed.append([op, 1])
print("shared bytes", compiled.metadata.shared)
print(" -> ".join(f"{op} ×{n}" if n > 1 else op for op, n in collapsed))
