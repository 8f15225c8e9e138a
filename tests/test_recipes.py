"""Recipes and geometry: the shipped recipes load; bad input names the file and field."""

import json

import pytest

from monobuild.compiler.errors import InputError, Refusal
from monobuild.compiler.plan import plan_recipe
from monobuild.compiler.recipe import load_recipe

from .conftest import RECIPES

SHIPPED = sorted(RECIPES.glob("*.yaml"))


def test_fifteen_recipes_are_shipped():
    names = {p.stem for p in SHIPPED}
    assert names == {f"{m}-{t}" for m in ("llama-3.2-1b", "qwen3-0.6b", "qwen3-8b", "qwen3-8b-fp8", "qwen3-30b-a3b")
                     for t in ("sm_90", "gfx942", "gfx950")}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_recipe_plans(path):
    recipe = load_recipe(path)
    assert recipe.deployment.target.name == path.stem.rsplit("-", 1)[1]
    plan = plan_recipe(recipe)
    routed = recipe.geometry.experts is not None
    kind = "moe" if routed else "layer"
    layer_programs = {p.name for p in plan.programs if p.kind == kind and p.mode == "persistent"}
    assert len(layer_programs) == len(recipe.deployment.bands)  # identical layers share one program
    for step in plan.steps:
        per_layer = [plan.program(x.program) for x in step.launches if x.layer == 0]
        if step.mode == "persistent":
            assert len(per_layer) == 1
        elif routed:  # the attention half, norm_up, router, experts_up, experts_down
            assert len(per_layer) == (9 if per_layer[0].param("NORM_STAGES") else 8)
        else:  # one launch per stage: six, and the two norm stages where the table makes them
            assert len(per_layer) == (8 if per_layer[0].param("NORM_STAGES") else 6)


def test_llama_geometry_and_rope():
    g = load_recipe(RECIPES / "llama-3.2-1b-sm_90.yaml").geometry
    assert (g.hidden, g.layers, g.q_heads, g.kv_heads, g.head_dim, g.intermediate, g.vocab) == \
        (2048, 16, 32, 8, 64, 8192, 128256)
    assert g.rope_kind == "llama3" and g.rope_scaling.factor == 32.0 and g.tied_head and not g.qk_norm


def test_qwen3_has_qk_norm_and_untied_head():
    g = load_recipe(RECIPES / "qwen3-8b-sm_90.yaml").geometry
    assert g.qk_norm and not g.tied_head and g.head_dim == 128 and g.rope_kind == "default"


def test_roofline_matches_the_measured_floor():
    """DESIGN.md's floor for Llama-3.2-1B, 1 row, context 1024 at 4.15 TB/s is 0.600 ms."""
    recipe = load_recipe(RECIPES / "llama-3.2-1b-sm_90.yaml")
    plan = plan_recipe(recipe)
    band = recipe.deployment.bands[0]
    assert 0.59e-3 < plan.step_bytes(band, 1024) / 4.15e12 < 0.62e-3


def _error(tiny_recipe, **overrides):
    with pytest.raises((InputError, Refusal)) as e:
        load_recipe(tiny_recipe(**overrides))
    return str(e.value)


@pytest.mark.parametrize("overrides,field", [
    ({"target": "sm_80"}, "target"),
    ({"dtype": "fp8"}, "dtype"),
    ({"kv_cache": {"dtype": "bf16", "block_size": 12}}, "kv_cache.block_size"),
    ({"bands": []}, "bands"),
    ({"bands": [1, "two"]}, "bands[1]"),
    ({"head": "probs"}, "head"),
    ({"sm_count": 0}, "sm_count"),
    ({"verify": {"rows": 4, "tokens": 6}}, "verify"),
    ({"verify": {"rows": 1, "tokens": 4, "draft_probs": "yes"}}, "verify.draft_probs"),
    ({"verify": {"rows": 1, "tokens": 4, "draft_probs": True}}, "verify.draft_probs"),  # a greedy head
    ({"max_context": 10**7}, "max_context"),
    ({"colour": "blue"}, "colour"),
    ({"stage_clock": "yes"}, "stage_clock"),
    ({"config": "missing.json"}, "config"),
])
def test_bad_recipe_names_file_and_field(tiny_recipe, overrides, field):
    message = _error(tiny_recipe, **overrides)
    assert field in message and ("tiny.yaml" in message or field.endswith(".json"))


def test_unknown_family_names_config_field(tiny_recipe, tmp_path):
    cfg = json.loads((tmp_path / "tiny-llama.json").read_text())
    cfg["model_type"] = "gpt2"
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
    message = _error(tiny_recipe)
    assert "tiny-llama.json: model_type" in message and "gpt2" in message


def test_malformed_json_and_yaml(tiny_recipe, tmp_path):
    (tmp_path / "tiny-llama.json").write_text("{ not json")
    assert "malformed JSON" in _error(tiny_recipe)
    bad = tmp_path / "bad.yaml"
    bad.write_text("config: [unclosed\n")
    with pytest.raises(InputError, match="malformed YAML"):
        load_recipe(bad)


def test_unsupported_geometry(tiny_recipe, tmp_path):
    cfg = json.loads((tmp_path / "tiny-llama.json").read_text())
    cfg["num_key_value_heads"] = 3
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
    assert "num_key_value_heads" in _error(tiny_recipe)


@pytest.mark.parametrize("key,config,method", [
    ("quantization_config", {"quant_method": "awq", "bits": 4}, "'awq'"),
    ("quantization_config", {"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes'"),
    ("compression_config", {"format": "pack-quantized"}, "'pack-quantized'"),
])
def test_a_quantized_checkpoint_is_refused_naming_its_method(tiny_recipe, tmp_path, key, config, method):
    """Planned as bf16, a quantized checkpoint would bind its tensors as what they are not (FP8
    block-scaled checkpoints are served: test_fp8)."""
    cfg = json.loads((tmp_path / "tiny-llama.json").read_text())
    cfg[key] = config
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
    message = _error(tiny_recipe)
    assert f"tiny-llama.json: {key}" in message and method in message and "not served" in message


def test_transformers5_rope_parameters(tiny_recipe, tmp_path):
    cfg = json.loads((tmp_path / "tiny-llama.json").read_text())
    cfg["rope_parameters"] = dict(cfg.pop("rope_scaling"), rope_theta=cfg.pop("rope_theta"))
    (tmp_path / "tiny-llama.json").write_text(json.dumps(cfg))
    g = load_recipe(tiny_recipe()).geometry
    assert g.rope_kind == "llama3" and g.rope_theta == 500000.0
