"""Routed (mixture-of-experts) models on CPU: the geometry read from config.json, what is refused
and why, the plan (a program for the dense layers and one for the routed ones, the routed ops,
their edges and bytes), and the experts bound in place. Their numerics under the interpreter are
in test_numerics.py, their contracts in test_routed_contracts.py."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from monobuild.bench.checkpoints import experts_apart, random_hf_state_dict
from monobuild.bench.roofline import step_bytes
from monobuild.cli.main import main
from monobuild.compiler.errors import InputError
from monobuild.compiler.geometry import geometry_from_config, load_config
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe
from monobuild.runtime import WeightError
from monobuild.runtime.weights import pack_hf_state_dict
from monobuild.schema import Experts

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parent.parent


def _config(name: str, **changes) -> dict:
    cfg = json.loads((DATA / name).read_text())
    return {k: v for k, v in {**cfg, **changes}.items() if v is not None}


def test_qwen3_moe_and_mixtral_geometry():
    g, _ = load_config(REPO / "recipes" / "configs" / "qwen3-30b-a3b.json")
    assert g.experts == Experts(count=128, top_k=8, intermediate=768, normalize=True)
    assert g.moe_layers == tuple(range(48)) and g.qk_norm
    g = geometry_from_config(_config("tiny-qwen3-moe.json"), "c")  # mlp_only_layers [1]
    assert g.moe_layers == (0, 2) and g.intermediate == 512 and g.experts.intermediate == 64
    g = geometry_from_config(_config("tiny-qwen3-moe.json", mlp_only_layers=[], decoder_sparse_step=2), "c")
    assert g.moe_layers == (1,)  # transformers: layer i is routed when (i + 1) % step == 0
    g = geometry_from_config(_config("tiny-qwen3-moe.json", norm_topk_prob=None), "c")
    assert not g.experts.normalize  # Qwen3-MoE's default
    g = geometry_from_config(_config("tiny-mixtral.json"), "c")
    assert g.experts == Experts(count=8, top_k=2, intermediate=128, normalize=True) and g.moe_layers == (0, 1)


def test_a_geometrys_experts_survive_the_manifest_record():
    from monobuild.schema import Geometry

    g = geometry_from_config(_config("tiny-qwen3-moe.json"), "c")
    assert Geometry.from_json(json.loads(json.dumps(g.to_json()))) == g


@pytest.mark.parametrize("name,changes,field,why", [
    ("tiny-qwen3-moe.json", {"num_experts_per_tok": 17}, "num_experts_per_tok", "17 experts per token, but the model "
                                                                                "has 16"),
    ("tiny-qwen3-moe.json", {"moe_intermediate_size": 60}, "moe_intermediate_size", "multiple of 16"),
    ("tiny-qwen3-moe.json", {"num_experts": None}, "num_experts", "missing"),
    ("tiny-qwen3-moe.json", {"mlp_only_layers": [7]}, "mlp_only_layers", "layer indexes below 3"),
    ("tiny-qwen3-moe.json", {"shared_expert_intermediate_size": 512}, "shared_expert_intermediate_size",
     "shared experts are not served yet"),
    ("tiny-qwen3.json", {"num_experts": 8}, "num_experts", "not served for model_type qwen3"),
    ("tiny-llama.json", {"n_routed_experts": 64}, "n_routed_experts", "not served for model_type llama"),
    ("tiny-qwen3-moe.json", {"model_type": "olmoe"}, "model_type", "unknown family 'olmoe'"),
])
def test_unserved_routed_configs_are_refused_naming_the_field(name, changes, field, why):
    with pytest.raises(InputError, match=why) as e:
        geometry_from_config(_config(name, **changes), "c")
    assert e.value.field == field


def _fp8_routed_recipe(tmp_path, block=(32, 64), **changes) -> Path:
    cfg = _config("tiny-qwen3-moe-fp8.json", **changes)
    cfg["quantization_config"]["weight_block_size"] = list(block)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "r.yaml").write_text("config: c.json\ntarget: sm_90\nsm_count: 4\ndtype: bf16\nkv_cache: {dtype: "
                                     "bf16, block_size: 16}\nbands: [1, 2]\nmax_context: 256\nhead: ids\n")
    return tmp_path / "r.yaml"


def test_an_fp8_routed_checkpoint_reads_its_experts_in_fp8_with_their_scales(tmp_path):
    """The experts' stacks are E4M3 with their block scales beside them; the router, the norms and
    the head stay bf16; an expert's bytes are its E4M3 values and its scales."""
    recipe = load_recipe(_fp8_routed_recipe(tmp_path))
    plan = plan_recipe(recipe)
    moe = plan.program("moe.r2t1.persistent")
    args = {a.name: a.type for a in moe.args}
    assert args["w_experts_gate_up"] == args["w_experts_down"] == args["w_q"] == "*fp8e4nv"
    assert args["w_experts_gate_up_scale"] == args["w_experts_down_scale"] == "*fp32"
    assert args["w_router"] == args["mlp_norm"] == "*bf16"
    e, h = recipe.geometry.experts, recipe.geometry.hidden
    stages = {s.name: s for s in moe.stages}
    assert stages["experts_up"].bytes_per_expert == 2 * e.intermediate * h + (2 * e.intermediate // 32) * (h // 64) * 4
    assert stages["experts_down"].bytes_per_expert == h * e.intermediate + (h // 32) * (e.intermediate // 64) * 4
    assert moe.param("BK") <= 64  # a chunk lies in one scale block's columns


def test_fp8_routed_layers_stream_e4m3_experts_and_the_bf16_router_in_the_same_ring(tmp_path):
    """Where the table streams, an FP8 checkpoint's routed program is the streaming executor's: its
    ring's units are E4M3, the experts' boxes as wide as a unit, and the router (bf16) streams the
    same bytes a unit as half the columns."""
    from monobuild.compiler.executor import tensordesc_block
    from monobuild.compiler.schedule import load_schedule, parse_schedule

    shipped = load_schedule("sm_90")
    doc = {"defaults": shipped.defaults.__dict__,
           "entries": [{"match": {"kind": kind}, "set": {"streaming": 1, "ctas_per_sm": 1, "block_k": 64}}
                       for kind in ("layer", "moe")]}
    plan = plan_recipe(load_recipe(_fp8_routed_recipe(tmp_path, block=(64, 64))), parse_schedule(doc, "table"))
    moe = plan.program("moe.r1t1.persistent")
    assert moe.executor == plan.program("layer.r1t1.persistent").executor == "gluon"
    assert moe.ring.weight == "fp8e4nv"
    ops = {op.name: op for op in moe.ops}
    cols = moe.ring.cols
    assert tensordesc_block(ops["experts_down"].binding("w_ptr").type) == ("fp8e4nv", (moe.ring.rows, cols))
    assert tensordesc_block(ops["experts_up"].binding("w_ptr").type) == ("fp8e4nv", (moe.ring.rows // 2, cols))
    assert tensordesc_block(ops["router"].binding("w_ptr").type) == ("bf16", (moe.ring.rows, cols // 2))
    assert ops["router"].binding("BK") == cols // 2 and ops["experts_up"].binding("QUANT")


def test_an_fp8_routed_checkpoint_whose_experts_split_a_scale_block_is_refused(tmp_path):
    recipe = _fp8_routed_recipe(tmp_path, block=(128, 128))  # 64 gate rows, half a block
    result = CliRunner().invoke(main, ["plan", str(recipe)])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "experts' 64 gate rows are not whole 128-row scale blocks" in result.output


@pytest.fixture
def routed_recipe(tiny_recipe, tmp_path):
    import shutil

    shutil.copy(DATA / "tiny-qwen3-moe.json", tmp_path / "tiny-qwen3-moe.json")
    return load_recipe(tiny_recipe(config="tiny-qwen3-moe.json", bands=[1, 4], verify={"rows": 1, "tokens": 3}))


def test_a_routed_model_plans_a_program_for_each_kind_of_layer(routed_recipe):
    plan = plan_recipe(routed_recipe)
    for step in plan.steps:
        kinds = [{plan.program(x.program).kind for x in step.launches if x.layer == i} for i in range(3)]
        assert kinds == [{"moe"}, {"layer"}, {"moe"}], step.mode
    moe = plan.program("moe.r4t1.persistent")
    assert [s.name for s in moe.stages][-4:] == ["norm_up", "router", "experts_up", "experts_down"]
    assert [(e.producer, e.consumer) for e in moe.syncs][-3:] == [("norm_up", "router"), ("router", "experts_up"),
                                                                   ("experts_up", "experts_down")]
    assert all(e.signals_per_epoch == moe.grid for e in moe.syncs)  # whatever routing chose
    regions = {r.name: r for r in moe.regions}
    assert regions["routed"].shape == (1 + 16,) and regions["routed"].kind == "io"  # 4 rows × 4 ≥ 16 experts
    assert regions["h_experts"].shape == (16, 4, 64)
    assert plan.program("moe.r1t1.persistent").param("SLOTS_P") == 4  # one row chooses its top 4
    e = routed_recipe.geometry.experts
    stages = {s.name: s for s in moe.stages}
    assert stages["experts_up"].bytes_per_expert == 2 * e.intermediate * routed_recipe.geometry.hidden * 2
    assert stages["experts_down"].bytes_per_expert == e.intermediate * routed_recipe.geometry.hidden * 2
    assert stages["router"].weight_bytes == e.count * routed_recipe.geometry.hidden * 2
    # the hidden state's partials: one count for both layer kinds, the embedding and the head
    parts = {p.param("DOWN_SPLIT") for p in plan.programs if p.kind in ("layer", "moe")}
    parts |= {p.param("X_PARTS") for p in plan.programs if p.kind in ("embed", "head")}
    assert len(parts) == 1


def test_routed_bytes_count_the_chosen_experts(routed_recipe):
    plan = plan_recipe(routed_recipe)
    band = next(b for b in routed_recipe.deployment.bands if b.rows == 4)
    g = routed_recipe.geometry
    per_expert = 3 * g.experts.intermediate * g.hidden * 2
    most = plan.step_bytes(band, 100)
    chosen = plan.step_bytes(band, 100, {0: 5, 2: 9})
    assert most - chosen == per_expert * (16 - 5 + 16 - 9)


def test_routed_roofline_bytes_from_the_manifest_equal_the_plans(routed_recipe, tmp_path):
    from monobuild.runtime import read_manifest

    result = CliRunner().invoke(main, ["compile", str(routed_recipe.source), "--out", str(tmp_path / "out"),
                                       "--cache", str(tmp_path / "cache"), "--jobs", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "out" / "tiny" / "sm_90")
    plan = plan_recipe(routed_recipe)
    for spec in manifest.steps:
        for selected in (None, {0: 4, 2: 7}):
            assert step_bytes(manifest, spec.band, 300, spec.mode, selected) == \
                plan.step_bytes(spec.band, 300, selected)
    inspect = CliRunner().invoke(main, ["inspect", str(tmp_path / "out" / "tiny" / "sm_90")])
    assert inspect.exit_code == 0 and "moe.r4t1.persistent" in inspect.output


@pytest.fixture
def routed():
    g = geometry_from_config(_config("tiny-qwen3-moe.json"), "c")
    return g, random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(0))


def test_fused_experts_are_bound_in_place(routed):
    g, sd = routed
    packed = pack_hf_state_dict(sd, g, torch.bfloat16)
    for i in g.moe_layers:
        layer, p = packed.layers[i], f"model.layers.{i}.mlp."
        assert layer.w_experts_gate_up.data_ptr() == sd[p + "experts.gate_up_proj"].data_ptr()
        assert layer.w_experts_down.data_ptr() == sd[p + "experts.down_proj"].data_ptr()
        assert layer.w_router.data_ptr() == sd[p + "gate.weight"].data_ptr()
        assert layer.w_gate is None and layer.w_down is None
    assert packed.layers[1].w_experts_gate_up is None and packed.layers[1].w_gate is not None  # the dense layer


def test_vllm_fused_experts_are_bound_in_place(routed):
    g, sd = routed
    vllm = dict(sd)
    for i in g.moe_layers:
        p = f"model.layers.{i}.mlp.experts."
        vllm[p + "w13_weight"], vllm[p + "w2_weight"] = vllm.pop(p + "gate_up_proj"), vllm.pop(p + "down_proj")
    packed = pack_hf_state_dict(vllm, g, torch.bfloat16)
    assert packed.layers[0].w_experts_gate_up.data_ptr() == vllm["model.layers.0.mlp.experts.w13_weight"].data_ptr()


@pytest.mark.parametrize("config", ["tiny-qwen3-moe.json", "tiny-mixtral.json"])
def test_experts_stored_apart_are_stacked_once(config):
    """A published checkpoint's per-expert tensors (Qwen3-MoE's names, Mixtral's w1/w3/w2 and
    block_sparse_moe.gate) bind to the same fused layout as transformers' own state_dict."""
    g = geometry_from_config(_config(config), "c")
    sd = random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(1))
    fused, apart = pack_hf_state_dict(sd, g, torch.bfloat16), pack_hf_state_dict(experts_apart(sd, g), g,
                                                                                 torch.bfloat16)
    for i in g.moe_layers:
        for field in ("w_router", "w_experts_gate_up", "w_experts_down"):
            assert torch.equal(getattr(fused.layers[i], field), getattr(apart.layers[i], field)), (i, field)


@pytest.fixture
def routed_fp8():
    g, quant = load_config(DATA / "tiny-qwen3-moe-fp8.json")
    return g, quant, random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(2), quant)


def test_fp8_experts_are_bound_in_place_with_their_scales(routed_fp8):
    """transformers' fused FP8 experts (``gate_up_proj`` and ``gate_up_proj_scale_inv``…) and vLLM's
    (``w13_weight_scale_inv``…) are read where they are; a published checkpoint's per-expert
    tensors and scales stack to the same values."""
    g, quant, sd = routed_fp8
    packed = pack_hf_state_dict(sd, g, torch.bfloat16, quant=quant)
    layer, p = packed.layers[0], "model.layers.0.mlp.experts."
    assert layer.w_experts_gate_up.dtype == torch.float8_e4m3fn
    assert layer.w_experts_gate_up_scale.data_ptr() == sd[p + "gate_up_proj_scale_inv"].data_ptr()
    assert layer.w_experts_down_scale.data_ptr() == sd[p + "down_proj_scale_inv"].data_ptr()
    vllm = dict(sd)
    for old, new in (("gate_up_proj", "w13_weight"), ("down_proj", "w2_weight")):
        for suffix in ("", "_scale_inv"):
            vllm[p + new + suffix] = vllm.pop(p + old + suffix)
    assert pack_hf_state_dict(vllm, g, torch.bfloat16, quant=quant).layers[0].w_experts_down_scale.data_ptr() == \
        sd[p + "down_proj_scale_inv"].data_ptr()
    apart = pack_hf_state_dict(experts_apart(sd, g), g, torch.bfloat16, quant=quant)
    for i in g.moe_layers:
        for field in ("w_experts_gate_up", "w_experts_down", "w_experts_gate_up_scale", "w_experts_down_scale"):
            ours, theirs = getattr(packed.layers[i], field), getattr(apart.layers[i], field)
            assert torch.equal(ours.view(torch.uint8) if ours.dtype == torch.float8_e4m3fn else ours,
                               theirs.view(torch.uint8) if theirs.dtype == torch.float8_e4m3fn else theirs), field
    # what the reference and the baseline multiply by: each expert dequantized with its own blocks
    from monobuild.bench.checkpoints import dequantized_state_dict

    plain = dequantized_state_dict(sd, quant, torch.float32)
    assert torch.equal(layer.experts("down", 5, torch.float32), plain[p + "down_proj"][5])
    chosen = torch.tensor([[3, 1]])
    assert torch.equal(layer.experts("gate_up", chosen, torch.float32)[0, 1], plain[p + "gate_up_proj"][1])


@pytest.mark.parametrize("edit,message", [
    (lambda sd: sd.pop("model.layers.0.mlp.experts.gate_up_proj_scale_inv"),
     r"model.layers.0.mlp.experts.gate_up_proj_scale_inv: missing \(expected \[16, 4, 4\] torch.float32\)"),
    (lambda sd: sd.__setitem__("model.layers.2.mlp.experts.down_proj",
                               sd["model.layers.2.mlp.experts.down_proj"].to(torch.bfloat16)),
     r"model.layers.2.mlp.experts.down_proj: expected \[16, 256, 64\] torch.float8_e4m3fn, got \[16, 256, 64\] "
     r"torch.bfloat16"),
])
def test_a_missing_or_misshaped_fp8_expert_tensor_is_named(routed_fp8, edit, message):
    g, quant, sd = routed_fp8
    edit(sd)
    with pytest.raises(WeightError, match=message):
        pack_hf_state_dict(sd, g, torch.bfloat16, quant=quant)


@pytest.mark.parametrize("edit,message", [
    (lambda sd: sd.pop("model.layers.2.mlp.experts.down_proj"),
     r"model.layers.2.mlp.experts.down_proj: missing \(expected \[16, 256, 64\] torch.bfloat16\)"),
    (lambda sd: sd.__setitem__("model.layers.0.mlp.experts.gate_up_proj", torch.ones(16, 64, 256, dtype=torch.bfloat16)),
     r"model.layers.0.mlp.experts.gate_up_proj: expected \[16, 128, 256\] torch.bfloat16, got \[16, 64, 256\]"),
    (lambda sd: sd.pop("model.layers.0.mlp.gate.weight"),
     r"model.layers.0.mlp.gate.weight: missing \(expected \[16, 256\] torch.bfloat16\)"),
    (lambda sd: [sd.pop(k) for k in [k for k in sd if k.startswith("model.layers.2.mlp.experts.")]],
     r"model.layers.2.mlp.experts.gate_up_proj: missing .*, and no per-expert tensors "
     r"\(model.layers.2.mlp.experts.0.gate_proj.weight…\) either"),
])
def test_a_missing_or_misshaped_expert_tensor_is_named(routed, edit, message):
    g, sd = routed
    edit(sd)
    with pytest.raises(WeightError, match=message):
        pack_hf_state_dict(sd, g, torch.bfloat16)
