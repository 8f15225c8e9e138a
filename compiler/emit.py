"""The emitter: a ProgramPlan becomes a Program — the Triton kernel, its named ABI and options.

The kernels are written once, in ``compiler/kernels``, and specialised here by constexprs: the
geometry, band, tiles, grid and which stages run (FIRST..LAST: all of them for a persistent
program, one for a staged one). The ABI lists the runtime parameters by name and type; arguments
a geometry does not use (a q/k/v bias, q/k norms) become constexpr ``None`` and leave the ABI.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .plan import ProgramPlan
from .recipe import Recipe

_TRITON_DTYPES = {"bf16": "bf16", "fp32": "fp32"}
KERNEL_SOURCES = (Path(__file__).parent / "kernels",)


@dataclass(frozen=True)
class Arg:
    name: str
    type: str  # Triton signature type: *bf16, *fp32, *i32, *i64, i32


@dataclass(frozen=True)
class Program:
    name: str
    kernel: str
    args: tuple[Arg, ...]  # the runtime parameters, in order (the named ABI)
    dropped: tuple[str, ...]  # parameters this specialisation does not use (constexpr None)
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    launch_pdl: bool
    launch_cooperative: bool
    grid: int

    def key_parts(self) -> tuple:
        """Everything about the program that changes its code."""
        return (self.kernel, self.args, self.dropped, self.constexprs, self.num_warps,
                self.launch_pdl, self.launch_cooperative)


def _layer_args(recipe: Recipe) -> tuple[list[Arg], list[str]]:
    g, d = recipe.geometry, recipe.deployment
    w, kv = "*" + _TRITON_DTYPES[d.dtype], "*" + _TRITON_DTYPES[d.kv_cache.dtype]
    f32, i32 = "*fp32", "*i32"
    args = [
        Arg("x_in", f32), Arg("x_out", f32), Arg("attn_norm", w), Arg("w_qkv", w), Arg("b_qkv", w),
        Arg("q_norm", w), Arg("k_norm", w), Arg("w_o", w), Arg("mlp_norm", w), Arg("w_gate_up", w),
        Arg("w_down", w), Arg("k_cache", kv), Arg("v_cache", kv), Arg("block_tables", i32),
        Arg("bt_stride", "i32"), Arg("context_lens", i32), Arg("positions", i32), Arg("rope", f32),
        Arg("qkv", f32), Arg("part_acc", f32), Arg("part_ml", f32), Arg("attn_out", w), Arg("x1", f32),
        Arg("h", w), Arg("x_hat_qkv", w), Arg("x_hat_up", w), Arg("counters", "*i64"), Arg("hang_log", "*i64"),
        Arg("stage_clock", "*i64"),
    ]
    dropped = _debug_args_dropped(recipe)
    if not g.qkv_bias:
        dropped.append("b_qkv")
    if not g.qk_norm:
        dropped += ["q_norm", "k_norm"]
    return args, dropped


def _head_args(recipe: Recipe) -> tuple[list[Arg], list[str]]:
    w = "*" + _TRITON_DTYPES[recipe.deployment.dtype]
    args = [Arg("x_in", "*fp32"), Arg("final_norm", w), Arg("w_head", w), Arg("logits", "*fp32"),
            Arg("tile_max", "*fp32"), Arg("tile_arg", "*i32"), Arg("next_ids", "*i32"), Arg("x_hat", w),
            Arg("counters", "*i64"), Arg("hang_log", "*i64"), Arg("stage_clock", "*i64")]
    dropped = _debug_args_dropped(recipe)
    if recipe.deployment.head != "ids":  # a logits head has no argmax stage
        dropped += ["tile_max", "tile_arg", "next_ids"]
    return args, dropped


def _debug_args_dropped(recipe: Recipe) -> list[str]:
    """The debug and profiling arguments a production build leaves out of the ABI."""
    d = recipe.deployment
    return ([] if d.debug_wait_spins else ["hang_log"]) + ([] if d.stage_clock else ["stage_clock"])


def _embed_args(recipe: Recipe) -> tuple[list[Arg], list[str]]:
    w = "*" + _TRITON_DTYPES[recipe.deployment.dtype]
    return [Arg("tokens", "*i32"), Arg("embed", w), Arg("x_out", "*fp32")], []


_ARGS = {"layer_kernel": _layer_args, "head_kernel": _head_args, "embed_kernel": _embed_args}


def emit(recipe: Recipe, plan: ProgramPlan) -> Program:
    args, dropped = _ARGS[plan.kernel](recipe)
    live = tuple(a for a in args if a.name not in dropped)
    return Program(plan.name, plan.kernel, live, tuple(dropped), plan.constexprs, plan.num_warps,
                   plan.launch_pdl, plan.launch_cooperative, plan.grid)


def kernel_function(name: str, module=None):
    """The @triton.jit function named ``name`` (from ``module``, default the compiled kernels)."""
    if module is None:
        from . import kernels as module
    return getattr(module, name)


def emitter_digest() -> str:
    """A digest of every source the code objects depend on (kernels, this emitter, the driver)."""
    h = hashlib.sha256()
    # driver.py too: it chooses the compile options (e.g. the register budget of a retry).
    files = sorted(p for root in KERNEL_SOURCES for p in root.glob("*.py")) + [Path(__file__),
                                                                               Path(__file__).parent / "driver.py"]
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()
