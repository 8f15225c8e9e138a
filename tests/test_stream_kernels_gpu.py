"""The streaming executor's device functions on a GPU, one at a time (Gluon does not run under
the interpreter). Marked ``gpu``; skipped without a CUDA device."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402

from monobuild.compiler.kernels.stream.gemv import _widen_x  # noqa: E402
from monobuild.compiler.kernels.stream.layouts import rows_layout, tile_smem  # noqa: E402


@gluon.jit
def _e4m3_to_f16(src, dst, N: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])  # four consecutive values a thread, as in a unit
    offs = gl.arange(0, N, layout=layout)
    gl.store(dst + offs, gl.load(src + offs).to(gl.float16))


@gluon.jit
def _widen_chunk(src, dst, R: gl.constexpr, C: gl.constexpr):
    layout: gl.constexpr = rows_layout(R, C, 4)
    at = gl.arange(0, R, layout=gl.SliceLayout(1, layout))[:, None] * C + gl.arange(
        0, C, layout=gl.SliceLayout(0, layout))[None, :]
    chunks = gl.allocate_shared_memory(gl.bfloat16, [2, R, C], tile_smem(R, C))
    chunks.index(0).store(gl.load(src + at))
    gl.thread_barrier()
    _widen_x(chunks.index(0), chunks.index(1), layout)
    gl.thread_barrier()
    wide = chunks.index(1)
    gl.store(dst + at, wide._reinterpret(gl.float16, wide.shape, wide.layout).load(layout))


def test_e4m3_widens_to_f16_exactly_for_every_code():
    """Every E4M3 code but the two NaNs, subnormals and signed zeros included, widens to the f16
    of the same value (f16 holds every E4M3 value)."""
    codes = torch.arange(256, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    out = torch.full((256,), float("nan"), dtype=torch.float16, device="cuda")
    _e4m3_to_f16[(1,)](codes, out, 256, num_warps=1)
    want = codes.to(torch.float16)
    finite = ~torch.isnan(want)
    assert int(finite.sum()) == 254
    assert torch.equal(out[finite].view(torch.int16), want[finite].view(torch.int16))


def test_activation_chunk_widens_to_f16_within_the_stated_bound():
    """The FP8 product's activations: x · 2⁻⁸ as f16 is x exactly for |x| in [2⁻⁶, 2²⁴), and off
    by at most 2⁻¹⁷ below (fresh bf16 values over 2⁻³⁰ .. 2²³, signs and zeros included; past
    2²⁴ the f16 overflows)."""
    rows, cols = 8, 512
    gen = torch.Generator(device="cuda").manual_seed(7)
    mag = torch.exp2(torch.randint(-30, 22, (rows, cols), device="cuda", generator=gen).double())
    x = (torch.randn(rows, cols, device="cuda", generator=gen, dtype=torch.float64) * mag).to(torch.bfloat16)
    x[0, :4] = 0.0
    out = torch.full((rows, cols), float("nan"), dtype=torch.float16, device="cuda")
    _widen_chunk[(1,)](x, out, rows, cols, num_warps=4)
    back = out.double() * 2.0 ** 8
    exact = x.double().abs() >= 2.0 ** -6
    assert exact.any() and (~exact).any()
    assert torch.equal(back[exact], x.double()[exact])
    assert float((back[~exact] - x.double()[~exact]).abs().max()) <= 2.0 ** -17
