"""The sample op compiled by Triton's JIT on random logits, against the float64 reference (a GPU check)."""
import torch
import triton
import triton.language as tl

from monobuild.bench.reference import philox_uniforms, sample_reference
from monobuild.compiler.kernels.head import _uniform, sample_op


@triton.jit
def run_sample(logits, tile_max, tile_arg, next_ids, positions, temperature, top_k, top_p, seed,
               V: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr, BV: tl.constexpr):
    sample_op(tl.program_id(0), 0, logits, tile_max, tile_arg, next_ids, positions, temperature, top_k, top_p, seed,
              V, M, BN, TILES_P, 1, 1, BV, 64)

@triton.jit
def dbg(logits, out, seed, position, V: tl.constexpr, BV: tl.constexpr):
    n = tl.arange(0, BV)
    best = tl.load(out + 100)
    inv_t = 1.0
    total = tl.full([], 0.0, tl.float32)
    for v0 in range(0, V, BV):
        v = v0 + n
        logit = tl.load(logits + v, mask=v < V, other=float("-inf"))
        total += tl.sum(tl.exp((logit - best) * inv_t), axis=0)
    tl.store(out + 0, total)
    floor = tl.full([], float("-inf"), tl.float32)
    r = tl.full([], 0, tl.int32)
    top_z = tl.full([], float("-inf"), tl.float32)
    x = tl.full([], -5, tl.int32)
    for v0 in range(0, V, BV):
        v = v0 + n
        logit = tl.load(logits + v, mask=v < V, other=float("-inf"))
        u = _uniform(seed, v.to(tl.uint32), position.to(tl.uint32), r.to(tl.uint32))
        if v0 == 0:
            tl.store(out + 200 + n, u)
        z = tl.where(logit > floor, (logit - best) * inv_t - tl.log(-tl.log(u)), float("-inf"))
        chunk_z, at = tl.max(z, axis=0, return_indices=True, return_indices_tie_break_left=True)
        x = tl.where(chunk_z > top_z, v0 + at, x)
        top_z = tl.maximum(chunk_z, top_z)
    tl.store(out + 1, top_z)
    tl.store(out + 2, x.to(tl.float32))
    lx = tl.load(logits + x)
    tl.store(out + 3, lx)
    above = tl.full([], 0, tl.int32)
    mass = tl.full([], 0.0, tl.float32)
    for v0 in range(0, V, BV):
        v = v0 + n
        logit = tl.load(logits + v, mask=v < V, other=float("-inf"))
        over = logit > lx
        above += tl.sum(over.to(tl.int32), axis=0)
        mass += tl.sum(tl.where(over, tl.exp((logit - best) * inv_t), 0.0), axis=0)
    tl.store(out + 4, above.to(tl.float32))
    tl.store(out + 5, mass)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
V, BN = 128256, 64
TILES = -(-V // BN)
torch.manual_seed(0)
logits = torch.randn(1, V, device=DEV) * 2
tm = logits[0, :TILES * BN].new_full((TILES * BN,), float("-inf"))
tm[:V] = logits[0]
tile_max, tile_arg = tm.view(TILES, BN).max(1)
tile_arg = (tile_arg + torch.arange(TILES, device=DEV) * BN).int()
for s in range(4):
    ids = torch.full((1,), -1, dtype=torch.int32, device=DEV)
    args = [logits, tile_max.contiguous(), tile_arg, ids, torch.tensor([100], dtype=torch.int32, device=DEV),
            torch.tensor([1.0], device=DEV), torch.tensor([0], dtype=torch.int32, device=DEV),
            torch.tensor([1.0], device=DEV), torch.tensor([s + 7], dtype=torch.int64, device=DEV)]
    run_sample[(1,)](*args, V=V, M=1, BN=BN, TILES_P=2048, BV=2048)
    want = sample_reference(logits[0].cpu(), 1.0, 0, 1.0, s + 7, 100, 64)
    print("seed", s + 7, "kernel", int(ids), "reference", want, "greedy", int(logits.argmax()))
out = torch.zeros(4096, device=DEV)
out[100] = logits.max()
dbg[(1,)](logits, out, 7, 100, V=V, BV=2048)
o = out.cpu()
print("total", o[0].item(), "top_z", o[1].item(), "x", o[2].item(), "lx", o[3].item(), "above", o[4].item(),
      "mass", o[5].item())
u_ref = philox_uniforms(7, 100, 0, 8)
print("u kernel", o[200:208].tolist(), "u ref", u_ref.tolist())
