"""The float64 reference step — what the interpreter tests measure the programs against — agrees
with transformers' own models on CPU: Llama (llama3 RoPE scaling, tied head), Qwen3 (q/k norm),
Mistral with a sliding window (a 40-position window under 130-token prompts: transformers keeps
only the window's last positions in its cache), and the routed families, Qwen3-MoE (with a dense
layer between routed ones, and as an FP8 checkpoint: its experts dequantized for transformers) and
Mixtral, bound from transformers' own state_dict (its fused expert tensors).

Each row's prompt is prefilled by the transformers model; its cache is copied into the paged KV
cache (rows scattered over random blocks) and the next tokens are run through both. Both
compute in float64 except transformers' RoPE tables, which it builds in float32 (cos/sin of
float32 angles, about 1e-7 relative); the reference builds them in float64. So the bound is 1e-6:
ten times that table's rounding, and far below any real mistake (a wrong RoPE variant, norm or
GQA mapping moves the logits by more than 1e-2).
"""

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from monobuild.bench.checkpoints import random_hf_state_dict  # noqa: E402
from monobuild.bench.hf import batched_cache, fill_paged, hf_model, prefill  # noqa: E402
from monobuild.bench.reference import reference_step  # noqa: E402
from monobuild.compiler.geometry import load_config  # noqa: E402
from monobuild.runtime.kvcache import allocate_kv_cache  # noqa: E402
from monobuild.runtime.weights import pack_hf_state_dict  # noqa: E402

DATA = Path(__file__).parent / "data"
BLOCK = 16


@pytest.mark.parametrize("config", ["tiny-llama.json", "tiny-qwen3.json", "tiny-qwen2-gqa3.json",
                                    "tiny-llama-fp8.json", "tiny-qwen3-fp8.json", "tiny-mistral-window.json",
                                    "tiny-qwen3-moe.json", "tiny-qwen3-moe-fp8.json", "tiny-mixtral.json"])
@pytest.mark.parametrize("tokens", [1, 3])
def test_reference_step_matches_transformers(config, tokens):
    path = DATA / config
    g, quant = load_config(path)
    gen = torch.Generator().manual_seed(len(config) + tokens)
    sd = random_hf_state_dict(g, torch.float64, gen, quant)
    model = hf_model(path, sd, torch.float64, "cpu", quant)
    weights = pack_hf_state_dict(sd if quant else model.state_dict(), g, torch.float64, quant=quant)

    lengths = [37, 5, 130]
    rows = len(lengths)
    prompts = [torch.randint(0, g.vocab, (n,), generator=gen) for n in lengths]
    pages = -(-(max(lengths) + tokens) // BLOCK)
    tables = torch.randperm(rows * pages + 7, generator=gen)[: rows * pages].view(rows, pages).to(torch.int32)
    kv = allocate_kv_cache(g, BLOCK, torch.float64, rows * pages + 7, "cpu")
    new = torch.randint(0, g.vocab, (rows, tokens), generator=gen)
    positions = torch.tensor(lengths)[:, None] + torch.arange(tokens)[None, :]
    with torch.no_grad():
        caches, _ = prefill(model, prompts)
        fill_paged(kv, caches, tables, lengths)
        cache, mask = batched_cache(caches)
        mask = torch.cat([mask, torch.ones(rows, tokens, dtype=torch.long)], 1)
        want = model(input_ids=new, position_ids=positions, attention_mask=mask, past_key_values=cache).logits
    got = reference_step(g, weights, list(kv.k), list(kv.v), new.flatten().to(torch.int32),
                         positions.flatten().to(torch.int32), tables,
                         torch.tensor(lengths, dtype=torch.int32) + tokens, tokens)
    want = want.reshape(rows * tokens, -1)
    err = ((got - want).norm() / want.norm()).item()
    print(f"{config} × {tokens}: {err:.1e}")
    assert err < 1e-6
