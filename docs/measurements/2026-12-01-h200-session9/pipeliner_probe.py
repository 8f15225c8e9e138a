"""Can one software-pipelined loop stream a layer's GEMV weights across its stages, with each
stage's sync wait inside the loop? A compile-only probe (CPU, Triton 3.6, sm_90):

    python pipeliner_probe.py OUT_DIR      # writes dep0/dep1 .ttgir and .ptx

The loop runs over (stage, chunk): each iteration loads a weight chunk and an activation chunk
and multiplies them, and a stage's first chunk spins on that stage's counter before its
activation load. With DEP=1 the activation's address also depends on the waited value.

Result (the TTGIR it writes, ninth session): the loop is pipelined 4 deep, and the pipeliner
treats the spin-wait as ordinary last-stage code. The prologue issues the weight and activation
copies of iterations 0-2 before any wait. In the loop body, the wait of iteration i comes after
the product of iteration i and after the copies of iteration i + 3. With DEP=1 the copies take
the gate from an earlier iteration. So a wait inside a pipelined loop does not order the
activation loads after it: the redesign that would stream weights across stage boundaries cannot
be written this way in Triton 3.6.
"""
import sys
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def probe(w_ptr, x_ptr, out_ptr, counters, target, STAGE_CHUNKS: tl.constexpr, N_STAGES: tl.constexpr,
          BK: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, DEP: tl.constexpr, STAGES: tl.constexpr):
    r = tl.arange(0, 16)
    n = tl.arange(0, BN)
    k = tl.arange(0, BK)
    acc = tl.zeros([16, BN], tl.float32)
    gate = tl.zeros([], tl.int64)
    for it in tl.range(0, N_STAGES * STAGE_CHUNKS, num_stages=STAGES):
        s = it // STAGE_CHUNKS
        c = it % STAGE_CHUNKS
        w = tl.load(w_ptr + it * BN * BK + n[:, None] * BK + k[None, :])
        if c == 0:
            seen = tl.atomic_add(counters + s, 0, sem="acquire", scope="gpu")
            while seen < target:
                seen = tl.atomic_add(counters + s, 0, sem="acquire", scope="gpu")
            if DEP:
                gate = seen - seen
        x = tl.load(x_ptr + gate + s * 16 * K + r[:, None] * K + c * BK + k[None, :], cache_modifier=".cg")
        acc += tl.dot(x, tl.trans(w))
        if c == STAGE_CHUNKS - 1:
            tl.store(out_ptr + s * 16 * BN + r[:, None] * BN + n[None, :], acc)
            acc = tl.zeros([16, BN], tl.float32)


for dep in (0, 1):
    src = ASTSource(probe, {"w_ptr": "*bf16", "x_ptr": "*bf16", "out_ptr": "*fp32", "counters": "*i64", "target": "i64",
                            "STAGE_CHUNKS": "constexpr", "N_STAGES": "constexpr", "BK": "constexpr", "BN": "constexpr",
                            "K": "constexpr", "DEP": "constexpr", "STAGES": "constexpr"},
                    constexprs={"STAGE_CHUNKS": 8, "N_STAGES": 4, "BK": 256, "BN": 32, "K": 2048, "DEP": dep, "STAGES": 4},
                    attrs={(i,): [["tt.divisibility", 16]] for i in range(4)})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    Path(sys.argv[1], f"dep{dep}.ttgir").write_text(c.asm["ttgir"])
    Path(sys.argv[1], f"dep{dep}.ptx").write_text(c.asm["ptx"])
    print("dep", dep, "shared", c.metadata.shared)
