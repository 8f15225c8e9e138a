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


def test_an_fp8_routed_checkpoint_is_refused_with_its_reason(tmp_path):
    cfg = _config("tiny-qwen3-moe.json", quantization_config={"quant_method": "fp8", "fmt": "e4m3",
                                                              "weight_block_size": [64, 64],
                                                              "activation_scheme": "dynamic"})
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "r.yaml").write_text("config: c.json\ntarget: sm_90\nsm_count: 4\ndtype: bf16\nkv_cache: {dtype: "
                                     "bf16, block_size: 16}\nbands: [1]\nmax_context: 256\nhead: ids\n")
    result = CliRunner().invoke(main, ["plan", str(tmp_path / "r.yaml")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "routed experts' GEMVs read bf16 or fp16 weights only" in result.output


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
