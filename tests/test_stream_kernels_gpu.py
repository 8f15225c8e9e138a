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

from monobuild.compiler.kernels.stream.gemv import _widen_e4m3  # noqa: E402


@gluon.jit
def _widen_all(src, dst, N: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])  # four consecutive values a thread: one word
    offs = gl.arange(0, N, layout=layout)
    gl.store(dst + offs, _widen_e4m3(gl.load(src + offs)))


def test_e4m3_widens_to_bf16_exactly_for_every_code():
    """Every E4M3 code but the two NaNs, subnormals and signed zeros included, against torch's
    conversion: the bit placement and the 2¹²⁰ multiply lose nothing."""
    codes = torch.arange(256, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    out = torch.full((256,), float("nan"), dtype=torch.bfloat16, device="cuda")
    _widen_all[(1,)](codes, out, 256, num_warps=1)
    want = codes.to(torch.bfloat16)
    finite = ~torch.isnan(want)
    assert int(finite.sum()) == 254
    assert torch.equal(out[finite].view(torch.int16), want[finite].view(torch.int16))
