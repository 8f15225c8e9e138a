"""The streaming executor (sm_90, Gluon) on CPU: what a streaming schedule plans, that its programs
compile and keep every contract, that planted defects in them are caught, and the runtime's side
of its TMA descriptors.

Gluon programs do not run under Triton's interpreter: their numerics are tested on the GPU
(``tests/test_runtime_gpu.py`` over a streaming package, ``tools/transformers_check.py``,
``tools/executor_diff.py``; docs/PERFORMANCE.md records the runs), while the same ops' Triton
programs keep the CPU numerics (``test_numerics.py``).
"""

import ctypes
import json
import re

import pytest
import yaml

from monobuild.compiler.contracts.check import check_package
from monobuild.compiler.contracts.plan_rules import param_index
from monobuild.compiler.contracts.ptx import parse_ptx
from monobuild.compiler.errors import InputError
from monobuild.compiler.executor import (
    gated_halves,
    register_cap,
    ring,
    shared_other,
    tensordesc_block,
    tensordesc_type,
    threads,
)
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.schedule import load_schedule, read_schedule
from monobuild.manifest import read_manifest
from monobuild.runtime.params import ParamBlock
from monobuild.runtime.tma import Descriptor

from .conftest import DATA, rebuild_code

LAYER = "layer.r1t1.persistent"
#: the projection tensors a layer streams, each through a descriptor of its own (the engine's, read in place)
WEIGHTS = ("w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down")


def unit_boxes(dtype: str, cols: int, halves: bool = False) -> dict[str, tuple[str, tuple[int, int]]]:
    """Each projection's TMA box in a 64-row streaming program: a unit of its rows, or for gate
    and up when the gated units are halves (half gate, half up rows) half a unit's."""
    return {w: (dtype, (32 if halves and w in ("w_gate", "w_up") else 64, cols)) for w in WEIGHTS}


STREAMING = {"streaming": 1, "block_k": 128, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1}


def streaming_table(path, target="sm_90", kinds=("layer",), **overrides):
    """The shipped table with every layer program of ``kinds`` (dense ``layer``, routed ``moe``) on
    the streaming executor (first entry wins)."""
    from importlib import resources

    doc = yaml.safe_load((resources.files("monobuild.schedules") / f"{target}.yaml").read_text())
    for kind in kinds:
        doc["entries"].insert(0, {"match": {"kind": kind}, "set": {**STREAMING, **overrides}})
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_streaming_entry_plans_the_persistent_layer_program_as_gluon(tiny_recipe, tmp_path):
    plan = plan_recipe(load_recipe(tiny_recipe()), read_schedule(streaming_table(tmp_path / "sm_90.yaml")))
    layer = plan.program(LAYER)
    assert layer.executor == "gluon" and layer.ring.slots > 2 and layer.ring.rows == 64 and layer.ring.cols == 128
    assert [s.name for s in layer.stages][:2] == ["norm_qkv", "qkv"]  # its RMSNorms are ops of their own
    descs = {a.name: tensordesc_block(a.type) for a in layer.args if tensordesc_block(a.type)}
    weights = unit_boxes("bf16", 128)
    # the caches in pages of one KV head ([block_size, head_dim]); a tile is as many pages as a unit holds
    assert descs == {**weights, "k_tiles": ("bf16", (16, 32)), "v_tiles": ("bf16", (16, 32))}
    attn = next(op for op in layer.ops if op.name == "attn")
    assert attn.binding("KT") == 64 * 128 * 2 // (2 * 2 * 32)
    assert {a.role for a in layer.args if a.name in ("k_tiles", "v_tiles")} == {"kv_cache"}
    # the staged programs and the head stay on the Triton executor, tiled like the streaming program
    assert {p.executor for p in plan.programs if p.kind == "layer" and p.mode == "staged"} == {"triton"}
    assert plan.program("layer.r1t1.qkv").param("BN") == 64
    assert {p.executor for p in plan.programs if p.kind != "layer"} == {"triton"}


def test_gated_units_are_halves_where_they_balance_the_op_over_the_ctas():
    """Halves (tiles of 32 rows) where they lower the most rows a CTA streams: Qwen3-8B's 192
    tiles of 64 on 132 CTAs (two a CTA at most) are 384 halves (three: 96 rows, not 128);
    Llama-3.2-1B's 128 tiles stream 64 rows a CTA either way, and keep whole units."""
    assert gated_halves(12288, 64, 132) and gated_halves(3072, 64, 132)  # Qwen3-8B, Qwen3-0.6B
    assert not gated_halves(8192, 64, 132)  # Llama-3.2-1B
    assert not gated_halves(512, 64, 4) and gated_halves(512, 64, 6)  # the tiny model: 8 tiles on 4 or 6 CTAs


def test_halves_plan_boxes_and_tiles_of_half_a_unit(tiny_recipe, tmp_path):
    table = read_schedule(streaming_table(tmp_path / "sm_90.yaml"))
    for sm_count, halves in ((4, False), (6, True)):
        layer = plan_recipe(load_recipe(tiny_recipe(sm_count=sm_count)), table).program(LAYER)
        up = next(op for op in layer.ops if op.name == "up")
        rows = 32 if halves else 64
        assert up.binding("HALVES") is halves and {op.binding("HALVES") for op in layer.ops
                                                   if op.body == "gemv_op" and op is not up} == {False}
        assert {a.name: tensordesc_block(a.type) for a in layer.args if tensordesc_block(a.type)
                and a.name.startswith("w_")} == unit_boxes("bf16", 128, halves)
        assert up.tasks == 512 // rows and f"(tiles of {rows})" in up.task
        assert next(s for s in layer.stages if s.name == "up").tasks == up.tasks


def test_the_ring_takes_what_shared_memory_holds():
    other = shared_other(4, 16, 64)  # attention's merge of 4 warps' [16, 64] fp32 states, and scratch
    assert other == 20 * 1024
    assert ring(0, 4, 128, 1, other).slots == 12 and ring(3, 4, 128, 1, other).slots == 3
    assert ring(0, 4, 256, 8, other).slots == 5 and ring(0, 8, 512, 1, other).slots == 2  # never fewer than two
    assert tensordesc_type("bf16", 64, 128).startswith("tensordesc<bf16[64, 128],NVMMASharedLayout(swizzle_byte_width=128")
    fp8 = ring(0, 4, 256, 1, other, "fp8e4nv")  # E4M3 units: half the bytes of bf16's, more of them
    assert fp8.unit_bytes == 64 * 256 and fp8.slots > ring(0, 4, 256, 1, other).slots
    assert tensordesc_type("fp8e4nv", 64, 128).startswith(
        "tensordesc<fp8e4nv[64, 128],NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8")


def test_streaming_where_it_cannot_run_is_refused_with_the_reason(tiny_recipe, tmp_path):
    gfx = streaming_table(tmp_path / "gfx950.yaml", "gfx950")
    recipe = load_recipe(tiny_recipe(target="gfx950"))
    with pytest.raises(InputError, match="streaming: the streaming executor is written for sm_90"):
        plan_recipe(recipe, read_schedule(gfx))
    long_tiles = read_schedule(streaming_table(tmp_path / "sm_90.yaml", long_kv_tile=128))
    with pytest.raises(InputError, match="long_kv_tile: a streaming program walks the KV cache kv_tile tokens"):
        plan_recipe(load_recipe(tiny_recipe()), long_tiles)
    two = read_schedule(streaming_table(tmp_path / "two.yaml", ctas_per_sm=2))
    with pytest.raises(InputError, match="ctas_per_sm: a streaming program is one CTA per SM"):
        plan_recipe(load_recipe(tiny_recipe()), two)


def test_a_deployment_of_other_dtypes_keeps_the_triton_executor(tiny_recipe, tmp_path):
    recipe = load_recipe(tiny_recipe(dtype="fp32", kv_cache={"dtype": "fp32", "block_size": 16}))
    plan = plan_recipe(recipe, read_schedule(streaming_table(tmp_path / "sm_90.yaml")))
    assert plan.program(LAYER).executor == "triton"


@pytest.mark.parametrize("head_dim", [48, 80, 256])
def test_heads_the_streaming_attention_is_not_written_for_keep_the_triton_executor(tiny_recipe, tmp_path, head_dim):
    """A head of another size than 16…128 columns and a power of two runs on the Triton executor,
    which pads it (a served geometry is never refused for its head), even where the table streams."""
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    (tmp_path / "tiny-llama.json").write_text(json.dumps(dict(cfg, head_dim=head_dim)))
    plan = plan_recipe(load_recipe(tiny_recipe()), read_schedule(streaming_table(tmp_path / "sm_90.yaml")))
    assert plan.program(LAYER).executor == "triton"
    assert plan.program(LAYER).param("DP") == 1 << (head_dim - 1).bit_length()


def test_the_shipped_table_streams_the_layer_programs_it_was_measured_for(tiny_recipe):
    """Llama-3.2-1B's, Qwen3-8B's and Qwen3-0.6B's 1-8-row persistent layer programs and
    Qwen3-30B-A3B's routed ones (docs/PERFORMANCE.md); their 1×6 programs, the staged programs,
    the heads and every other geometry keep Triton."""
    from .conftest import RECIPES

    paths = {p.stem: p for p in RECIPES.glob("*.yaml")}
    for name, kind in (("llama-3.2-1b-sm_90", "layer"), ("qwen3-8b-sm_90", "layer"), ("qwen3-0.6b-sm_90", "layer"),
                       ("qwen3-30b-a3b-sm_90", "moe")):
        plan = plan_recipe(load_recipe(paths[name]))
        gluon = {p.name for p in plan.programs if p.executor == "gluon"}
        assert gluon == {f"{kind}.r{r}t1.persistent" for r in (1, 2, 4, 8)}, name
    assert {p.executor for p in plan_recipe(load_recipe(tiny_recipe()), load_schedule("sm_90")).programs} == {"triton"}


def _tiny_fp8(tmp_path):
    """The tiny recipe over the tiny Llama's FP8 checkpoint (64 × 128 scale blocks)."""
    from .conftest import DATA, TINY_RECIPE

    (tmp_path / "tiny-llama-fp8.json").write_text((DATA / "tiny-llama-fp8.json").read_text())
    path = tmp_path / "tiny-fp8.yaml"
    path.write_text(TINY_RECIPE.replace("tiny-llama.json", "tiny-llama-fp8.json"))
    return load_recipe(path)


def test_fp8_weights_stream_as_e4m3_units_of_whole_scale_blocks(tmp_path):
    """A streamed FP8 unit is whole 128-column scale blocks (the table's block_k 64 rounds up to
    one) of E4M3; its 64 rows lie in one 64-row block. The staged programs keep their chunks, and
    every K split is whole units of both."""
    plan = plan_recipe(_tiny_fp8(tmp_path), read_schedule(streaming_table(tmp_path / "sm_90.yaml", block_k=64)))
    layer = plan.program(LAYER)
    assert layer.executor == "gluon" and (layer.ring.weight, layer.ring.cols) == ("fp8e4nv", 128)
    descs = {a.name: tensordesc_block(a.type) for a in layer.args if tensordesc_block(a.type)}
    assert {w: descs[w] for w in WEIGHTS} == unit_boxes("fp8e4nv", 128)
    assert {a.name for a in layer.args} >= {w + "_scale" for w in WEIGHTS}
    for op in (op for op in layer.ops if op.body == "gemv_op"):
        assert op.binding("BK") == 128 and op.binding("QUANT") and op.binding("K") // op.binding("SPLIT") % 128 == 0
    staged = [op for p in plan.programs if p.kind == "layer" and p.mode == "staged" for op in p.ops]
    assert {op.binding("BK") for op in staged if op.body == "gemv_op"} == {64}


def test_fp8_tiles_taller_than_a_scale_block_keep_the_triton_executor(tmp_path):
    """Eight compute warps stream 128-row tiles; the tiny checkpoint's scale blocks are 64 rows,
    so a unit would need two scales a column block: its program stays the Triton executor's,
    which scales each row."""
    table = read_schedule(streaming_table(tmp_path / "sm_90.yaml", num_warps=8))
    assert plan_recipe(_tiny_fp8(tmp_path), table).program(LAYER).executor == "triton"


def test_a_streamed_kv_tile_too_small_for_the_warps_is_refused(tiny_recipe, tmp_path):
    """A KV tile is whole pages of K and V in one ring unit, 16 tokens a compute warp at least: a
    unit of 64 rows × 16 columns holds 16 tokens of the tiny model's 32-wide heads."""
    table = read_schedule(streaming_table(tmp_path / "sm_90.yaml", block_k=16))
    with pytest.raises(InputError, match="block_k: a streamed KV tile is whole pages .* at least 64 tokens"):
        plan_recipe(load_recipe(tiny_recipe()), table)


def test_a_streaming_program_without_norm_stages_norms_in_its_gemvs(tiny_recipe, tmp_path):
    """norm_stages 0: no norm ops; qkv and up take the norm weights and stage their CTA's own x̂."""
    table = read_schedule(streaming_table(tmp_path / "sm_90.yaml", norm_stages=0))
    layer = plan_recipe(load_recipe(tiny_recipe()), table).program(LAYER)
    assert layer.executor == "gluon" and [s.name for s in layer.stages] == ["qkv", "attn", "combine", "o", "up",
                                                                             "down"]
    for name, norm in (("qkv", "attn_norm"), ("up", "mlp_norm")):
        op = next(op for op in layer.ops if op.name == name)
        assert op.binding("NORM") and op.binding("norm_ptr").name == norm and op.binding("x_hat_ptr") is not None


def test_a_warp_specialized_cta_past_256_threads_gets_its_part_of_the_register_file():
    """Eight compute warps and the loader's warpgroup are 384 threads: 168 registers each at
    launch (65536 / 384, a multiple of 8); four and the loader (256 threads) keep the compiler's."""
    assert threads(8) == 384 and register_cap(8) == 168
    assert threads(4) == 256 and register_cap(4) is None



def test_a_streaming_program_no_rung_makes_servable_runs_on_the_triton_executor(tiny_recipe, tmp_path, monkeypatch):
    """The fallback ladder's rungs are written for the Triton executor's programs: where a streaming
    program keeps a stack frame (contract C3) at every one of them, the last rung puts the band's
    layer program on the Triton executor instead of refusing the model, and says so."""
    import dataclasses

    from monobuild.compiler import build as build_module

    def framed(code):  # a streaming code object (it has TMA descriptors) reports a stack frame
        if code is not None and code.tensor_maps:
            return dataclasses.replace(code, resources=dataclasses.replace(code.resources, stack_bytes=40))
        return code

    real_get, real_compile = build_module.CodeCache.get, build_module._compile_one
    monkeypatch.setattr(build_module.CodeCache, "get", lambda self, key, name: framed(real_get(self, key, name)))
    monkeypatch.setattr(build_module, "_compile_one", lambda item: framed(real_compile(item)))
    # four KV heads of 32: q, k and v start at multiples of 128 rows, so 8 compute warps (128-row
    # units, the ladder's second rung) still stream, and only the last rung leaves the executor
    config = json.loads((DATA / "tiny-llama.json").read_text()) | {"num_key_value_heads": 4}
    (tmp_path / "tiny-kv4.json").write_text(json.dumps(config))
    recipe = load_recipe(tiny_recipe(config="tiny-kv4.json", bands=[1], modes=["persistent"]))
    table = read_schedule(streaming_table(tmp_path / "sm_90.yaml"))
    result = build_module.build(recipe, tmp_path / "out", tmp_path / "cache", schedule=table)
    assert len(result.derived) == 1 and result.derived[0].startswith("layer r1t1: derived")
    assert "; the Triton executor), since the table's entry keeps 40 B a thread in local memory" in result.derived[0]
    layer = read_manifest(result.package).program(LAYER)
    assert layer.executor == "triton" and not layer.tensor_maps and layer.resources.stack_bytes == 0

# -- compiled: the package and its contracts ---------------------------------------------------

@pytest.fixture(scope="module")
def package(tmp_path_factory):
    from .conftest import compile_tiny

    root = tmp_path_factory.mktemp("streaming")
    table = streaming_table(root / "sm_90.yaml")
    return compile_tiny(root, "--schedule", str(table))[1]


def test_the_package_names_its_executor_and_descriptors(package):
    manifest = read_manifest(package)
    layer = manifest.program(LAYER)
    assert layer.executor == "gluon" and layer.block == 256  # 4 compute warps and the loader's warpgroup
    maps = {t.arg: (t.box, t.swizzle, t.elem_bytes) for t in layer.tensor_maps}
    assert maps == {**{w: (box, 3, 2) for w, (_, box) in unit_boxes("bf16", 64).items()},
                    "k_tiles": ((16, 32), 2, 2), "v_tiles": ((16, 32), 2, 2)}
    index = param_index(layer)  # a descriptor is five kernel parameters: itself, its shape, its strides
    names = [a.name for a in layer.args]
    desc = names.index("w_q")
    assert index[names[desc + 1]] == index["w_q"] + 5
    assert {p.executor for p in manifest.programs if p.mode == "staged" or p.kind != "layer"} == {"triton"}


def test_the_streaming_package_keeps_every_contract(package):
    report = check_package(package)
    assert report.ok, "\n".join(v.line() for v in report.violations)


def test_a_streaming_package_of_gated_halves_keeps_every_contract(tmp_path):
    """At 6 SMs the tiny model's up op streams halves (tiles of 32): their boxes, and every
    contract; with one half's copy deleted, its unit's barrier waits for bytes that never come (S2)."""
    import shutil

    from .conftest import compile_tiny

    package = compile_tiny(tmp_path, "--schedule", str(streaming_table(tmp_path / "sm_90.yaml")), "--sm-count", "6")[1]
    layer = read_manifest(package).program(LAYER)
    assert {t.arg: t.box for t in layer.tensor_maps if t.arg.startswith("w_")} == \
        {w: box for w, (_, box) in unit_boxes("bf16", 64, halves=True).items()}
    report = check_package(package)
    assert report.ok, "\n".join(v.line() for v in report.violations)

    planted = tmp_path / "planted"
    shutil.copytree(package, planted)
    _drop_copy(planted, "w_up")
    rebuild_code(planted, LAYER)
    assert "S2" in {v.contract for v in check_package(planted).violations if v.program == LAYER}


def test_a_streaming_package_whose_gemvs_norm_keeps_every_contract(tmp_path):
    """norm_stages 0: each GEMV CTA stages its own x̂ (stores, a CTA barrier, then its reads)."""
    from .conftest import compile_tiny

    package = compile_tiny(tmp_path, "--schedule", str(streaming_table(tmp_path / "sm_90.yaml", norm_stages=0)))[1]
    assert read_manifest(package).program(LAYER).executor == "gluon"
    report = check_package(package)
    assert report.ok, "\n".join(v.line() for v in report.violations)


@pytest.mark.parametrize("sm_count,halves", [(4, False), (6, True)])
def test_a_streaming_fp8_package_keeps_every_contract(tmp_path, sm_count, halves):
    """The tiny FP8 checkpoint's streaming programs: E4M3 descriptors (1-byte elements, 128-byte
    rows, the 128 B swizzle) and every contract kept, with whole gated units and with halves
    (each half its own scales)."""
    from .conftest import compile_tiny

    table = streaming_table(tmp_path / "sm_90.yaml")
    package = compile_tiny(tmp_path, "--schedule", str(table), "--sm-count", str(sm_count),
                           config="tiny-llama-fp8.json")[1]
    layer = read_manifest(package).program(LAYER)
    assert layer.executor == "gluon"
    assert {t.arg: (t.box, t.swizzle, t.elem_bytes) for t in layer.tensor_maps if t.arg.startswith("w_")} == \
        {w: (box, 3, 1) for w, (_, box) in unit_boxes("fp8e4nv", 128, halves).items()}
    report = check_package(package)
    assert report.ok, "\n".join(v.line() for v in report.violations)


def _ptx(pkg, program: str = LAYER):
    return pkg / "ir" / f"{program}.ptx"


def _replace(pkg, old, new, count=-1):
    path = _ptx(pkg)
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


def relaxed_poll(pkg):
    _replace(pkg, "ld.acquire.gpu.global.b64", "ld.relaxed.gpu.global.b64", 1)


def relaxed_signal(pkg):
    _replace(pkg, "atom.global.gpu.release.add", "atom.global.gpu.relaxed.add", 1)


def half_armed(pkg):
    text = _ptx(pkg).read_text()
    site = next(line for line in text.splitlines() if "mbarrier.arrive.expect_tx" in line)
    _replace(pkg, site, site.replace(", 16384;", ", 8192;"), 1)


def stream_of_a_region(pkg):
    """The loader's descriptor of w_o taken from the parameter of qkv (a region other CTAs write)."""
    layer = read_manifest(pkg).program(LAYER)
    index = param_index(layer)
    _replace(pkg, f"layer_kernel_param_{index['w_o']};", f"layer_kernel_param_{index['qkv']};")


def _drop_copy(pkg, descriptor: str, program: str = LAYER):
    """The program's first TMA copy through ``descriptor``'s parameter deleted."""
    layer = read_manifest(pkg).program(program)
    text = _ptx(pkg, program).read_text()
    ptx = parse_ptx(text)
    param = param_index(layer)[descriptor]
    copy = next(i for i in ptx.instrs if i.opcode.startswith("cp.async.bulk.tensor") and param in ptx.address_params(i))
    lines = text.split("\n")
    del lines[copy.line - 1]
    _ptx(pkg, program).write_text("\n".join(lines))


def kv_copy_dropped(pkg):
    """One of a KV tile's page copies deleted: its unit's barrier waits for bytes that never come."""
    _drop_copy(pkg, "v_tiles")


def kv_of_a_region(pkg):
    """The loader's K descriptor taken from the parameter of part_acc (a region other CTAs write)."""
    index = param_index(read_manifest(pkg).program(LAYER))
    _replace(pkg, f"layer_kernel_param_{index['k_tiles']};", f"layer_kernel_param_{index['part_acc']};")


def missing_wait(pkg):
    """One edge's poll loop deleted: the consumer no longer waits."""
    lines = _ptx(pkg).read_text().split("\n")
    polls = [k for k, line in enumerate(lines) if "ld.acquire.gpu.global.b64" in line]
    del lines[polls[-1]]
    _ptx(pkg).write_text("\n".join(lines))


def _fill_and_its_wait(lines: list[str]) -> tuple[int, int]:
    """The line numbers (0-based) of the program's first refill (``expect_tx``) and of the slot
    wait before it."""
    fill = next(k for k, line in enumerate(lines) if "mbarrier.arrive.expect_tx" in line)
    return fill, max(k for k in range(fill) if "mbarrier.try_wait.parity" in lines[k])


def _address(line: str) -> str:
    return line.split("[")[-1].split("]")[0].strip()


def refill_unguarded(pkg):
    """The loader's wait for a slot's release before its first refill made a no-op."""
    lines = _ptx(pkg).read_text().split("\n")
    _, wait = _fill_and_its_wait(lines)
    lines[wait] = "\tsetp.eq.u32 complete, 0, 0;"
    _ptx(pkg).write_text("\n".join(lines))


def refill_waits_on_ready(pkg):
    """The loader's wait before its first refill on the slot's ready barrier, not its empty one."""
    lines = _ptx(pkg).read_text().split("\n")
    fill, wait = _fill_and_its_wait(lines)
    ready, empty = (max(k for k in range(fill) if lines[k].split()[:2] == ["add.s32", _address(lines[at]) + ","])
                    for at in (fill, wait))
    lines[empty] = lines[empty].rsplit(",", 1)[0] + "," + lines[ready].rsplit(",", 1)[1]
    _ptx(pkg).write_text("\n".join(lines))


def release_unfenced(pkg):
    """The compute warps' first fence.proxy.async before a slot's release deleted."""
    lines = _ptx(pkg).read_text().split("\n")
    del lines[next(k for k, line in enumerate(lines) if "fence.proxy.async" in line)]
    _ptx(pkg).write_text("\n".join(lines))


@pytest.mark.parametrize("plant,contract", [
    (relaxed_poll, "I2"), (relaxed_signal, "I1"), (half_armed, "S2"), (stream_of_a_region, "S1"),
    (missing_wait, "I4"), (kv_copy_dropped, "S2"), (kv_of_a_region, "S1"), (refill_unguarded, "S3"),
    (refill_waits_on_ready, "S3"), (release_unfenced, "S3"),
])
def test_each_planted_defect_in_a_streaming_program_is_caught(package, tmp_path, plant, contract):
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(package, pkg)
    plant(pkg)
    rebuild_code(pkg, LAYER)  # as the compiler would have built the planted IR
    found = [v for v in check_package(pkg).violations if v.program == LAYER]
    assert contract in {v.contract for v in found}, "\n".join(v.line() for v in found) or "nothing caught"


# -- the PTX reader on a warp-specialized program ----------------------------------------------

def test_an_instruction_naming_a_state_space_is_not_a_label():
    """``fence.proxy.async.shared::cta;`` unpredicated: an instruction (S3 looks for it), not the
    label ``fence.proxy.async.shared`` followed by ``:cta``."""
    ptx = parse_ptx(".visible .entry k(\n)\n{\n\tfence.proxy.async.shared::cta;\n\tret;\n}\n")
    assert [i.opcode for i in ptx.instrs] == ["fence.proxy.async.shared::cta", "ret"] and not ptx.labels


def test_loops_come_from_the_control_flow_graph_not_the_text_order():
    """LLVM may place a loop's body after the code that follows it (a backward branch that leaves
    the loop), and inline PTX repeats its scoped labels at every call site: neither is a loop."""
    ptx = parse_ptx("""
.visible .entry k(
)
{
$L__BB0_1:
\tadd.s32 %r1, %r1, 1;
\tbra.uni $L__BB0_3;
$L__BB0_2:
\tadd.s32 %r3, %r3, 1;
\tbra.uni $L__BB0_4;
$L__BB0_3:
\tsetp.lt.s32 %p1, %r1, 9;
\t@%p1 bra $L__BB0_3;
\tbra.uni $L__BB0_2;
$L__BB0_4:
{
\t.reg .pred complete;
\twaitLoop:
\tmbarrier.try_wait.parity.shared.b64 complete, [%r5], %r6;
\t@!complete bra.uni waitLoop;
}
{
\t.reg .pred complete;
\twaitLoop:
\tmbarrier.try_wait.parity.shared.b64 complete, [%r7], %r6;
\t@!complete bra.uni waitLoop;
}
\tret;
}
""")
    op = {i.opcode.split(".")[0] + str(k): i.index for k, i in enumerate(ptx.instrs)}
    assert len(ptx.loops) == 3  # the loop at BB0_3 and the two waits
    first_add, second_add = op["add0"], op["add2"]
    assert ptx.in_loop(first_add) is None and ptx.in_loop(second_add) is None
    waits = [i.index for i in ptx.instrs if i.opcode.startswith("mbarrier")]
    assert ptx.in_loop(waits[0]) != ptx.in_loop(waits[1])


def test_a_descriptor_parameter_is_the_map_then_its_shape_and_strides():
    encoded = bytes(range(128))
    block = ParamBlock([tensordesc_type("bf16", 64, 128), "i32", "*i64"],
                       [Descriptor(encoded, (3072, 2048), (2048, 1)), 7, 0x7F0000002000])
    assert block.count == 1 + 2 + 2 + 1 + 1 + 2
    pointers = (ctypes.c_void_p * block.count).from_address(block.address)
    assert pointers[0] % 64 == 0 and ctypes.string_at(pointers[0], 128) == encoded
    assert [ctypes.c_int32.from_address(pointers[k]).value for k in (1, 2)] == [3072, 2048]
    assert [ctypes.c_int64.from_address(pointers[k]).value for k in (3, 4)] == [2048, 1]
    assert ctypes.c_int32.from_address(pointers[5]).value == 7
    block[1] = 9  # slots are indexed by ABI argument
    assert ctypes.c_int32.from_address(pointers[5]).value == 9
    with pytest.raises(ValueError, match="takes a TMA descriptor"):
        ParamBlock([tensordesc_type("bf16", 64, 128)], [0x7F0000001000])


def test_an_older_manifest_format_is_refused(package, tmp_path):
    import shutil

    from monobuild.manifest import MANIFEST_FORMAT, PackageError

    pkg = tmp_path / "pkg"
    shutil.copytree(package, pkg)
    doc = json.loads((pkg / "manifest.json").read_text())
    doc["format"] = 3
    (pkg / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(PackageError, match=f"manifest format 3 is not {MANIFEST_FORMAT}"):
        read_manifest(pkg)


def test_a_kv_cache_is_described_as_its_token_rows_in_place():
    """The KV descriptors read a layer's [blocks, block_size, kv_heads, head_dim] cache as
    [blocks · block_size, kv_heads · head_dim]: a view of the engine's tensor, not a copy."""
    import torch

    from monobuild.runtime.tma import token_rows

    cache = torch.arange(3 * 16 * 2 * 8, dtype=torch.float32).reshape(3, 16, 2, 8)
    rows = token_rows(cache)
    assert rows.shape == (48, 16) and rows.data_ptr() == cache.data_ptr()
    assert torch.equal(rows[17, 8:], cache[1, 1, 1])  # block 1, slot 1, KV head 1


# -- routed layers -------------------------------------------------------------------------------

MOE_LAYER = "moe.r1t1.persistent"


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    """The tiny Qwen3-MoE (a dense layer between two routed ones) with both layer kinds streaming:
    (its recipe, its schedule table, its package)."""
    from .conftest import compile_tiny

    root = tmp_path_factory.mktemp("routed")
    table = streaming_table(root / "sm_90.yaml", kinds=("layer", "moe"))
    recipe, package = compile_tiny(root, "--schedule", str(table), config="tiny-qwen3-moe.json")
    return recipe, table, package


@pytest.fixture(scope="module")
def routed_package(routed):
    return routed[2]


def test_a_routed_layer_streams_its_experts_once_routed(routed):
    """The routed persistent programs are the streaming executor's: the expert stacks are read
    through descriptors over their stacked rows (experts_up's boxes half a unit: an expert's gate
    rows above its up rows), and the program allocates the slot table and the mbarrier the
    loader waits on before the experts' units."""
    from monobuild.compiler.emit import emit

    recipe, table, package = routed
    manifest = read_manifest(package)
    moe = manifest.program(MOE_LAYER)
    assert moe.executor == "gluon" and moe.block == 256
    maps = {t.arg: t.box for t in moe.tensor_maps}
    assert maps["w_experts_gate_up"] == (32, 64) and maps["w_experts_down"] == (64, 64)
    assert maps["w_router"] == (64, 64)
    assert {p.executor for p in manifest.programs if p.kind == "moe" and p.mode == "staged"} == {"triton"}
    plan = plan_recipe(load_recipe(recipe), read_schedule(table)).program(MOE_LAYER)
    up = next(op for op in plan.ops if op.name == "experts_up")
    assert up.tasks == 4 * 2  # the 1-row band's 4 slots × 64 rows in tiles of 32
    source = emit(plan).source
    assert "slot_table = gl.allocate_shared_memory(gl.int32, [4]" in source
    assert "mbarrier.init(routed_bar, count=1)" in source
    assert "load_experts_up(pid, i, ring, ready, empty, slot_table, routed_bar," in source
    dense = emit(plan_recipe(load_recipe(recipe), read_schedule(table)).program(LAYER)).source
    assert "slot_table" not in dense  # a dense layer's program allocates no routing buffers


def test_a_routed_streaming_package_keeps_every_contract(routed_package):
    report = check_package(routed_package)
    assert report.ok, "\n".join(v.line() for v in report.violations)


def test_a_dropped_expert_copy_is_caught(routed_package, tmp_path):
    """One of experts_up's gate/up copies deleted: its unit's barrier waits for bytes that never come (S2)."""
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(routed_package, pkg)
    _drop_copy(pkg, "w_experts_gate_up", MOE_LAYER)
    rebuild_code(pkg, MOE_LAYER)
    assert "S2" in {v.contract for v in check_package(pkg).violations if v.program == MOE_LAYER}


def test_an_unfenced_release_in_a_routed_program_is_caught(routed_package, tmp_path):
    """The routed program's last fence.proxy.async in the text deleted: its slot's release is
    caught (S3), although the program also arrives, unfenced, on routed_bar, which is no slot."""
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(routed_package, pkg)
    lines = _ptx(pkg, MOE_LAYER).read_text().split("\n")
    del lines[max(k for k, line in enumerate(lines) if "fence.proxy.async" in line)]
    _ptx(pkg, MOE_LAYER).write_text("\n".join(lines))
    rebuild_code(pkg, MOE_LAYER)
    assert "S3" in {v.contract for v in check_package(pkg).violations if v.program == MOE_LAYER}


def test_plan_shows_how_each_streamed_ops_units_spread_over_the_ctas(tmp_path):
    """Beside each weight-streaming op of a streaming program, ``monobuild plan`` prints the units
    its busiest and its median CTA stream, and the CTAs that stream none (compiler/balance.py):
    on 3 SMs the tiny model's 1-row experts_up (4 slots × 2 tiles of 32 rows, 4 chunks of 64)
    leaves two CTAs 3 tasks of 4 units and one CTA 2; its router (16 experts, one tile, K in 2
    splits of 2 chunks) one CTA idle."""
    import shutil

    from click.testing import CliRunner

    from monobuild.cli.main import main

    from .conftest import TINY_RECIPE

    shutil.copy(DATA / "tiny-qwen3-moe.json", tmp_path / "tiny-qwen3-moe.json")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY_RECIPE.replace("tiny-llama.json", "tiny-qwen3-moe.json").replace("sm_count: 4", "sm_count: 3"))
    table = streaming_table(tmp_path / "sm_90.yaml", kinds=("layer", "moe"), block_k=64)
    shown = CliRunner().invoke(main, ["plan", str(recipe), "--schedule", str(table)])
    assert shown.exit_code == 0, shown.output
    program = shown.output.split("program moe.r1t1.persistent")[1].split("\n\n")[0]
    stages = {m.group(1): line for line in program.split("\n") if (m := re.search(r"stage \d+ (\w+) ", line))}
    assert stages["experts_up"].endswith("busiest CTA 12 units (median 12)"), stages["experts_up"]
    assert stages["router"].endswith("busiest CTA 2 units (median 2, 1 of 3 CTAs idle)"), stages["router"]
    assert "busiest" not in stages["attn"] and "busiest" not in stages["norm_up"]


def test_an_expert_stack_is_described_as_its_stacked_rows_in_place():
    """A routed layer's descriptor reads [experts, rows, cols] as [experts · rows, cols], a view of
    the engine's tensor; a stack that is not one block of memory is refused, not copied."""
    import torch

    from monobuild.runtime.tma import stacked_rows

    stack = torch.arange(4 * 6 * 8, dtype=torch.float32).reshape(4, 6, 8)
    rows = stacked_rows(stack)
    assert rows.shape == (24, 8) and rows.data_ptr() == stack.data_ptr()
    assert torch.equal(rows[2 * 6 + 5], stack[2, 5])
    with pytest.raises(ValueError, match="not contiguous"):
        stacked_rows(stack.transpose(1, 2))
