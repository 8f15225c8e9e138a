"""FP8 checkpoints (E4M3 projections with block scales): what is read from config.json, what a
recipe may say of it, how it is planned, and how its tensors are bound. The numerics of the
FP8 programs are in test_numerics (the tiny-*-fp8 cases, against the float64 reference over
the dequantized weights)."""

import json

import pytest
import torch
import yaml

from monobuild.bench.checkpoints import quantize_fp8_blocks, random_hf_state_dict
from monobuild.compiler.errors import InputError
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.compiler.schedule import load_schedule, parse_schedule
from monobuild.manifest import MANIFEST_FORMAT
from monobuild.runtime.checkpoint import SafetensorsCheckpoint
from monobuild.runtime.weights import WeightError, pack_hf_state_dict
from monobuild.schema import PackageDeployment, WeightQuant

from .conftest import DATA, RECIPES

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [64, 128]}


@pytest.fixture
def fp8_recipe(tmp_path):
    """A writer of a tiny FP8 recipe: (recipe overrides, quantization_config overrides) → path."""
    def write(quant=None, **overrides):
        cfg = json.loads((DATA / "tiny-llama.json").read_text())
        cfg["quantization_config"] = {**FP8, **(quant or {})}
        (tmp_path / "tiny-fp8.json").write_text(json.dumps(cfg))
        doc = {"config": "tiny-fp8.json", "target": "sm_90", "sm_count": 4, "dtype": "bf16",
               "kv_cache": {"dtype": "bf16", "block_size": 16}, "bands": [1, 2], "max_context": 256,
               "head": "ids", "modes": ["persistent", "staged"], **overrides}
        path = tmp_path / "tiny-fp8.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path
    return write


def test_an_fp8_config_is_read_with_its_blocks(fp8_recipe):
    d = load_recipe(fp8_recipe()).deployment
    assert d.quant == WeightQuant("fp8", "e4m3", 64, 128)
    assert (d.dtypes.weights, d.dtypes.projection, d.dtypes.scales, d.dtypes.activations) == \
        ("bf16", "fp8e4nv", "fp32", "bf16")


@pytest.mark.parametrize("quant,field,why", [
    ({"fmt": "e5m2"}, "quantization_config.fmt", "'e5m2' is not served"),
    ({"activation_scheme": "static"}, "quantization_config.activation_scheme", "'static' activation scales"),
    ({"weight_block_size": None}, "quantization_config.weight_block_size", "per-tensor and per-channel"),
    ({"weight_block_size": [96, 128]}, "quantization_config.weight_block_size", "powers of two"),
    ({"weight_block_size": [128]}, "quantization_config.weight_block_size", "expected [rows, columns]"),
    ({"modules_to_not_convert": ["lm_head", "model.layers.0.mlp.down_proj"]},
     "quantization_config.modules_to_not_convert", "left unquantized"),
    ({"quant_method": "gptq"}, "quantization_config.quant_method", "'gptq' quantization is not served"),
])
def test_an_fp8_variant_the_programs_do_not_read_is_refused(fp8_recipe, quant, field, why):
    with pytest.raises(InputError) as e:
        load_recipe(fp8_recipe(quant))
    assert f"tiny-fp8.json: {field}: " in str(e.value) and why in str(e.value)


def test_blocks_taller_than_a_projection_are_served(fp8_recipe):
    """The tiny model's k/v projections have 64 rows, half a 128-row block: each tensor has its own
    scales, its last block partial, so nothing needs the blocks to divide them (the interpreter's
    numerics case tiny-llama-fp8-128 computes with them)."""
    assert load_recipe(fp8_recipe({"weight_block_size": [128, 128]})).deployment.quant.block_rows == 128


def test_modules_left_in_bf16_outside_the_layers_are_served(fp8_recipe):
    assert load_recipe(fp8_recipe({"modules_to_not_convert": ["lm_head"]})).deployment.quant is not None


def test_a_recipe_may_restate_the_quantization_but_not_change_it(fp8_recipe, tiny_recipe):
    restated = {"quant_method": "fp8", "weight_block_size": [64, 128]}
    assert load_recipe(fp8_recipe(quantization=restated)).deployment.quant.block_rows == 64
    with pytest.raises(InputError) as e:
        load_recipe(fp8_recipe(quantization={"weight_block_size": [128, 128]}))
    assert "tiny-fp8.yaml: quantization.weight_block_size: [128, 128] contradicts" in str(e.value)
    assert "tiny-fp8.json's quantization_config.weight_block_size, [64, 128]" in str(e.value)
    with pytest.raises(InputError, match="tiny-fp8.yaml: quantization: 'none' contradicts"):
        load_recipe(fp8_recipe(quantization="none"))
    with pytest.raises(InputError, match="tiny-llama.json has no quantization_config"):
        load_recipe(tiny_recipe(quantization={"quant_method": "fp8"}))
    with pytest.raises(InputError, match="quantization.bits: unknown field"):
        load_recipe(fp8_recipe(quantization={"bits": 8}))
    with pytest.raises(InputError, match="tiny-fp8.yaml: dtype: fp32 with the FP8 checkpoint"):
        load_recipe(fp8_recipe(dtype="fp32"))


def test_the_plan_reads_projections_in_fp8_with_their_scales(fp8_recipe, tiny_recipe):
    plan, bf16 = plan_recipe(load_recipe(fp8_recipe())), plan_recipe(load_recipe(tiny_recipe()))
    layer = next(p for p in plan.programs if p.kind == "layer" and p.mode == "persistent")
    args = {a.name: a for a in layer.args}
    for name in ("w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down"):
        assert args[name].type == "*fp8e4nv" and args[name + "_scale"].type == "*fp32"
        assert args[name + "_scale"].role == "layer_weight"
    assert args["attn_norm"].type == "*bf16"
    head = next(p for p in plan.programs if p.kind == "head" and p.mode == "persistent")
    assert {a.name: a.type for a in head.args}["w_head"] == "*bf16"  # the LM head stays bf16
    assert layer.param("BK") <= 128  # a K chunk lies inside one scale block
    # half the projection bytes, plus one fp32 scale a 64 × 128 block
    g = plan.recipe.geometry
    proj = g.qkv_rows * g.hidden + g.hidden * g.q_heads * g.head_dim + 3 * g.intermediate * g.hidden
    scales = sum(-(-r // 64) * -(-c // 128) for r, c in (
        (g.qkv_rows, g.hidden), (g.hidden, g.q_heads * g.head_dim), (2 * g.intermediate, g.hidden),
        (g.hidden, g.intermediate)))
    fp8_bytes = sum(s.weight_bytes for s in layer.stages)
    bf16_layer = next(p for p in bf16.programs if p.kind == "layer" and p.mode == "persistent")
    assert sum(s.weight_bytes for s in bf16_layer.stages) - fp8_bytes == proj - 4 * scales


def test_fp8_programs_stream_e4m3_units_of_the_bf16_entrys_bytes():
    """The shipped table's Qwen3-8B entries (bf16 units of 256 columns, 32 KB) stream the FP8
    1–8-row programs in units of the same bytes: 512 E4M3 columns, four whole scale blocks, so
    attention's KV tiles (which share the ring) keep their 64 tokens. Every K split is whole
    units; the band's Triton programs (staged, and the 1×6 band) keep one scale block a chunk."""
    fp8 = plan_recipe(load_recipe(RECIPES / "qwen3-8b-fp8-sm_90.yaml"))
    bf16 = plan_recipe(load_recipe(RECIPES / "qwen3-8b-sm_90.yaml"))
    for name in ("layer.r1t1.persistent", "layer.r8t1.persistent"):
        ours, theirs = fp8.program(name), bf16.program(name)
        assert ours.executor == theirs.executor == "gluon"
        assert (ours.ring.weight, ours.ring.cols, ours.ring.unit_bytes) == ("fp8e4nv", 512, theirs.ring.unit_bytes)
        kt = lambda p: next(op for op in p.ops if op.name == "attn").binding("KT")  # noqa: E731
        assert kt(ours) == kt(theirs) == 64
        for op in (op for op in ours.ops if op.body == "gemv_op"):
            assert op.binding("BK") == 512 and op.binding("K") // op.binding("SPLIT") % 512 == 0, op.name
    triton = [p for p in fp8.programs if p.kind == "layer" and p.executor == "triton"]
    assert {p.band.name for p in triton if p.mode == "persistent"} == {"r1t6"}
    assert {op.binding("BK") for p in triton for op in p.ops if op.body == "gemv_op"} == {128}


def test_a_schedule_entry_for_fp8_weights_serves_only_them(fp8_recipe, tiny_recipe):
    shipped = load_schedule("sm_90")
    doc = {"defaults": shipped.defaults.__dict__,
           "entries": [{"match": {"kind": "layer"}, "set": {"block_n": 32}},
                       {"match": {"kind": "layer", "weights": "fp8e4nv"}, "set": {"block_n": 64}}]}
    table = parse_schedule(doc, "test table")
    bn = lambda path: next(p for p in plan_recipe(load_recipe(path), table).programs  # noqa: E731
                           if p.kind == "layer").param("BN")
    assert (bn(fp8_recipe()), bn(tiny_recipe())) == (64, 32)


def test_quantized_blocks_dequantize_to_the_weight():
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(1))
    quant = WeightQuant("fp8", "e4m3", 64, 128)
    values, scale = quantize_fp8_blocks(w, quant)
    assert values.dtype == torch.float8_e4m3fn and scale.shape == (4, 3)
    dense = scale.repeat_interleave(64, 0)[:200].repeat_interleave(128, 1)[:, :300]
    err = (values.float() * dense - w).abs() / w.abs().clamp(min=dense * 2**-6)
    assert err.max() <= 2**-4  # E4M3 keeps 3 mantissa bits: half a unit is 2⁻⁴ of the value


def _tiny_fp8_state_dict():
    recipe_cfg = json.loads((DATA / "tiny-llama-fp8.json").read_text())
    from monobuild.compiler.geometry import geometry_from_config
    from monobuild.compiler.quant import quant_from_config

    g = geometry_from_config(recipe_cfg, "tiny-llama-fp8.json")
    quant = quant_from_config(recipe_cfg, "tiny-llama-fp8.json")
    return g, quant, random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(0), quant)


def test_an_fp8_checkpoint_binds_with_its_scales_and_dequantizes(tmp_path):
    g, quant, sd = _tiny_fp8_state_dict()
    from safetensors.torch import save_file

    save_file(sd, str(tmp_path / "model.safetensors"))
    packed = pack_hf_state_dict(SafetensorsCheckpoint(tmp_path / "model.safetensors"), g, torch.bfloat16, quant=quant)
    layer = packed.layers[1]
    assert layer.w_k.dtype == torch.float8_e4m3fn
    assert layer.w_k_scale.shape == (g.kv_heads * g.head_dim // 64, g.hidden // 128)
    p = "model.layers.1.self_attn."
    want = torch.cat([sd[p + n + "_proj.weight"].double() * sd[p + n + "_proj.weight_scale_inv"].double()
                     .repeat_interleave(64, 0).repeat_interleave(128, 1) for n in "qkv"])
    assert torch.equal(layer.projection("qkv", torch.float64), want)


def test_an_fp8_checkpoint_with_fused_projections_binds_its_scales_as_views():
    from monobuild.bench.checkpoints import fused_like_vllm

    g, quant, sd = _tiny_fp8_state_dict()
    fused = fused_like_vllm(sd, g.layers)
    hf, vllm = (pack_hf_state_dict(d, g, torch.bfloat16, quant=quant) for d in (sd, fused))
    for i, (a, b) in enumerate(zip(hf.layers, vllm.layers)):
        scales = fused[f"model.layers.{i}.mlp.gate_up_proj.weight_scale_inv"]
        assert b.w_gate_scale.data_ptr() == scales.data_ptr() and b.w_up_scale.data_ptr() > scales.data_ptr()
        for name in ("qkv", "gate_up"):
            assert torch.equal(a.projection(name, torch.float64), b.projection(name, torch.float64)), (i, name)


@pytest.mark.parametrize("change,message", [
    (lambda sd: sd.pop("model.layers.0.mlp.up_proj.weight_scale_inv"), "up_proj.weight_scale_inv: missing"),
    (lambda sd: sd.update({"model.layers.1.self_attn.o_proj.weight": torch.zeros(256, 256, dtype=torch.bfloat16)}),
     r"o_proj.weight: expected \[256, 256\] torch.float8_e4m3fn, got \[256, 256\] torch.bfloat16"),
    (lambda sd: sd.update({"model.layers.0.mlp.down_proj.weight_scale_inv": torch.ones(4, 2)}),
     r"down_proj.weight_scale_inv: expected \[4, 4\] torch.float32, got \[4, 2\]"),
])
def test_an_fp8_checkpoint_that_disagrees_with_the_package_is_refused_naming_the_tensor(change, message):
    g, quant, sd = _tiny_fp8_state_dict()
    change(sd)
    with pytest.raises(WeightError, match=message):
        pack_hf_state_dict(sd, g, torch.bfloat16, quant=quant)


def test_the_manifest_records_the_quantization(fp8_recipe):
    record = load_recipe(fp8_recipe()).deployment.package_record()
    again = PackageDeployment.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.quant.block_cols == 128 and MANIFEST_FORMAT >= 4


def test_the_shipped_fp8_config_is_qwen3_8b_with_block_scales():
    fp8 = json.loads((RECIPES / "configs" / "qwen3-8b-fp8.json").read_text())
    bf16 = json.loads((RECIPES / "configs" / "qwen3-8b.json").read_text())
    assert {k: v for k, v in fp8.items() if k != "quantization_config"} == bf16
    assert load_recipe(RECIPES / "qwen3-8b-fp8-sm_90.yaml").deployment.quant == WeightQuant("fp8", "e4m3", 128, 128)


def test_the_tiny_fp8_configs_are_the_tiny_models_quantized():
    for name in ("tiny-llama", "tiny-qwen3"):
        fp8 = json.loads((DATA / f"{name}-fp8.json").read_text())
        assert {k: v for k, v in fp8.items() if k != "quantization_config"} == \
            json.loads((DATA / f"{name}.json").read_text())

