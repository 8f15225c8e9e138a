"""``tools/transformers_check.py``'s rules for a routed model, on CPU: the router logits its hooks
take from transformers' own Qwen3-MoE equal the ones transformers returns itself, a routed choice
is called within bf16's reach exactly where the reference's k-th/(k+1)-th gap allows, and a run is
judged on the steps routed alike, or on every step where none was."""

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from monobuild.bench.checkpoints import random_hf_state_dict  # noqa: E402
from monobuild.bench.hf import hf_model  # noqa: E402
from monobuild.compiler.geometry import load_config  # noqa: E402

TOOL = Path(__file__).resolve().parent.parent / "tools" / "transformers_check.py"
_spec = importlib.util.spec_from_file_location("transformers_check", TOOL)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def test_router_hooks_match_transformers_router_logits():
    path = Path(__file__).parent / "data" / "tiny-qwen3-moe.json"
    g, quant = load_config(path)
    gen = torch.Generator().manual_seed(3)
    model = hf_model(path, random_hf_state_dict(g, torch.float32, gen, quant), torch.float32, "cpu", quant)
    seen = check.router_logits(model)
    ids = torch.randint(0, g.vocab, (2, 5), generator=gen)
    with torch.no_grad():
        want = model(input_ids=ids, output_router_logits=True).router_logits
    routed = [layer for layer in model.model.layers if hasattr(layer.mlp, "experts")]
    assert len(seen) == len(want) == len(routed) >= 1
    for got, ref in zip(seen, want):
        assert got.shape == (10, g.experts.count)
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_routing_reach_and_agreement():
    ref = torch.tensor([[4.0, 3.0, 2.9, 0.0]])  # top-2 is {0, 1}; 1 and 2 lie 0.1 apart
    near = (ref + torch.tensor([[0.0, 0.0, 0.06, 0.0]]),)  # bf16 off by 0.06: 2 × 0.06 reaches 0.1
    far = (ref + torch.tensor([[0.0, 0.0, 0.04, 0.0]]),)
    assert check.routing_reach((ref,), near, 2) == [({0, 1}, True)]
    assert check.routing_reach((ref,), far, 2) == [({0, 1}, False)]

    def record(*experts):
        return {0: torch.tensor([len(experts), *experts])}

    assert check.routing_agreement(record(1, 0), [({0, 1}, False)]) == "same"
    assert check.routing_agreement(record(0, 2), [({0, 1}, True)]) == "within reach"
    assert check.routing_agreement(record(0, 2), [({0, 1}, False)]) == "decided"


def _step(routing: str, ratio: float) -> dict:
    mode = {"routing": routing, "ratio": ratio, "rel_err": ratio / 100, "ids_decided": 1, "ids_wrong": 0}
    return {"context": [10], "bf16_rel_err": 0.01, "m": mode}


def test_summarize_judges_steps_routed_alike_else_every_step():
    alike = check.summarize(1, [9], [_step("same", 0.5), _step("within reach", 3.0)], ["m"])["modes"]["m"]
    assert (alike["ratio_max"], alike["steps_routed_apart"], alike["pass"]) == (0.5, 1, True)

    none_alike = [_step("within reach", 1.2), _step("within reach", 0.4)]
    every = check.summarize(8, [9], none_alike, ["m"])["modes"]["m"]
    assert (every["ratio_max"], every["steps_routed_apart"], every["pass"]) == (1.2, 0, True)
    over = check.summarize(8, [9], none_alike + [_step("within reach", check.RATIO_BOUND + 0.1)], ["m"])
    assert over["modes"]["m"]["pass"] is False

    decided = check.summarize(1, [9], [_step("same", 0.5), _step("decided", 0.5)], ["m"])["modes"]["m"]
    assert decided["steps_routed_otherwise_where_decided"] == 1 and decided["pass"] is False
