"""Tensor parallelism's sharding rules (``monobuild.parallel``), a rank's shard of a whole
checkpoint (``runtime.shards``) and the N-rank reference step (``bench.reference``): the ranks'
step, each on its shard and its share of the KV cache, is the whole model's step."""

import dataclasses
from pathlib import Path

import pytest
import torch

from monobuild.bench.checkpoints import experts_apart, random_hf_state_dict
from monobuild.bench.reference import reference_step, tensor_parallel_reference_step
from monobuild.compiler.geometry import load_config
from monobuild.parallel import TensorParallel
from monobuild.runtime import WeightError
from monobuild.runtime.shards import shard_state_dict
from monobuild.runtime.weights import pack_hf_state_dict

DATA = Path(__file__).parent / "data"
BLOCK, BLOCKS = 16, 12


def _geometry(name: str):
    return load_config(DATA / name)


def test_a_rank_holds_its_share_of_heads_rows_and_vocabulary():
    g, _ = _geometry("tiny-llama.json")  # 8 query heads, 2 KV heads, intermediate 512, vocabulary 512
    shapes = {n: (r.q_heads, r.kv_heads, r.intermediate, r.vocab)
              for n in (1, 2, 4, 8) for r in [TensorParallel(n).rank_geometry(g)]}
    assert shapes == {1: (8, 2, 512, 512), 2: (4, 1, 256, 256), 4: (2, 1, 128, 128), 8: (1, 1, 64, 64)}
    tp = TensorParallel(8)  # each KV head on four consecutive ranks, as vLLM replicates them
    assert tp.kv_replicas(g) == 4 and [tp.kv_block(g, r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    padded = dataclasses.replace(g, vocab=500)  # padded to 512, 64 rows a step
    assert TensorParallel(4).vocab_range(padded, 3) == (384, 512)


@pytest.mark.parametrize("change,n,reason", [
    ({}, 3, "3 ranks: the sizes served are 1, 2, 4, 8"),
    ({"q_heads": 6, "kv_heads": 2}, 4, "6 query heads do not split over 4 ranks"),
    ({"q_heads": 12, "kv_heads": 3}, 2, "3 KV heads neither split over 2 ranks nor repeat a whole number of times"),
    ({"q_heads": 12, "kv_heads": 3}, 4, "3 KV heads neither split over 4 ranks nor repeat"),
    ({"intermediate": 100}, 8, "the intermediate size 100 does not split over 8 ranks"),
])
def test_what_does_not_split_is_refused_with_its_reason(change, n, reason):
    g, _ = _geometry("tiny-llama.json")
    assert reason in TensorParallel(n).refusal(dataclasses.replace(g, **change))


def test_an_fp8_checkpoint_splits_only_into_whole_scale_blocks():
    """vLLM's rule: a rank's output rows and input columns of a block-scaled projection are whole
    blocks (Qwen3-30B-A3B-FP8's experts, 768 rows of 128-row blocks, split over 2 ranks, not 4)."""
    g, quant = load_config(DATA / "configs" / "qwen3-30b-a3b-fp8.json")
    assert TensorParallel(2).refusal(g, quant) is None
    assert TensorParallel(4).refusal(g, quant) == ("a rank's 192 experts' intermediate rows are not whole "
                                                   "128-row scale blocks")
    g, quant = _geometry("tiny-llama-fp8.json")  # [64, 128] blocks: 2 ranks hold 32 KV rows each
    assert TensorParallel(2).refusal(g, quant) == "a rank's 32 KV rows are not whole 64-row scale blocks"
    with pytest.raises(WeightError, match="32 KV rows"):
        shard_state_dict({}, g, TensorParallel(2), 0, quant)


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "configs").glob("*.json")))
def test_the_corpus_splits_as_vllm_serves_it(name):
    """Every config of the corpus splits over 2 ranks; where 4 or 8 do not, the reason is one
    vLLM refuses too (query heads, FP8 scale blocks)."""
    g, quant = load_config(DATA / "configs" / name)
    assert TensorParallel(2).refusal(g, quant) is None
    for n in (4, 8):
        reason = TensorParallel(n).refusal(g, quant)
        assert reason is None or "query heads do not split" in reason or "scale blocks" in reason, reason


def test_a_shard_is_a_view_and_the_vocabulary_padding_is_zeros():
    g, _ = _geometry("tiny-qwen2-gqa3.json")  # untied head, q/k/v biases
    g = dataclasses.replace(g, vocab=500)
    sd = random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(0))
    tp = TensorParallel(2)
    shard = shard_state_dict(sd, g, tp, 1)
    q = sd["model.layers.0.self_attn.q_proj.weight"]
    assert shard["model.layers.0.self_attn.q_proj.weight"].data_ptr() == q[3 * 32:].data_ptr()
    assert torch.equal(shard["model.layers.0.self_attn.k_proj.bias"], sd["model.layers.0.self_attn.k_proj.bias"][32:])
    assert torch.equal(shard["model.layers.0.self_attn.o_proj.weight"],
                       sd["model.layers.0.self_attn.o_proj.weight"][:, 96:])
    assert torch.equal(shard["model.layers.1.mlp.down_proj.weight"], sd["model.layers.1.mlp.down_proj.weight"][:, 192:])
    head = shard["lm_head.weight"]
    assert head.shape == (256, 192) and torch.equal(head[:244], sd["lm_head.weight"][256:])
    assert not head[244:].any()
    assert shard["model.norm.weight"] is sd["model.norm.weight"]
    fused = {"model.layers.0.self_attn.qkv_proj.weight": q}
    with pytest.raises(WeightError, match="qkv_proj.weight: a fused tensor"):
        shard_state_dict(fused, g, tp, 0)


def _step_inputs(tokens_per_row: int, vocab: int, seed: int):
    """Two live rows (contexts 5 and 19, this step's tokens included) and a padding row, their
    pages scattered over the cache."""
    gen = torch.Generator().manual_seed(seed)
    contexts = [5, 19, 0]
    tables = torch.randperm(BLOCKS, generator=gen)[:6].view(3, 2).to(torch.int32)
    positions = torch.cat([torch.arange(c - tokens_per_row, c) if c else torch.zeros(tokens_per_row, dtype=torch.long)
                           for c in contexts])
    tokens = torch.randint(0, vocab, (3 * tokens_per_row,), generator=gen)
    return tokens, positions, tables, torch.tensor(contexts, dtype=torch.int32)


CASES = [("tiny-llama.json", 2, 1), ("tiny-llama.json", 4, 2), ("tiny-llama.json", 8, 1),
         ("tiny-qwen3.json", 2, 1), ("tiny-qwen2-gqa3.json", 2, 1), ("tiny-mistral-window.json", 2, 1),
         ("tiny-qwen3-moe.json", 2, 1), ("tiny-mixtral.json", 4, 1), ("tiny-qwen3-fp8.json", 2, 2),
         ("tiny-qwen3-moe-fp8.json", 2, 1)]


@pytest.mark.parametrize("name,n,tokens_per_row", CASES)
def test_the_ranks_step_is_the_whole_models(name, n, tokens_per_row):
    """Each rank's shard (cut from the whole checkpoint, packed for its rank geometry) and its
    KV heads' caches: the N-rank step's logits are the whole model's (float64, so only the
    summation order differs), and each rank's caches gain its KV heads' K/V of the whole step."""
    g, quant = _geometry(name)
    if name == "tiny-mixtral.json":
        g = dataclasses.replace(g, vocab=500)  # a vocabulary the padding does not divide evenly
    if quant is not None and g.experts is not None:  # a rank's experts in whole [32, 64] blocks
        g = dataclasses.replace(g, experts=dataclasses.replace(g.experts, intermediate=128))
    sd = random_hf_state_dict(g, torch.bfloat16, torch.Generator().manual_seed(1), quant)
    if g.experts is not None and name == "tiny-mixtral.json":
        sd = experts_apart(sd, g)  # a published checkpoint's experts, each its own tensors
    tp = TensorParallel(n)
    r = tp.rank_geometry(g)
    gen = torch.Generator().manual_seed(2)
    caches = [[torch.randn(BLOCKS, BLOCK, g.kv_heads, g.head_dim, generator=gen).to(torch.bfloat16)
               for _ in range(g.layers)] for _ in "kv"]
    heads = [slice(tp.kv_block(g, rank) * r.kv_heads, (tp.kv_block(g, rank) + 1) * r.kv_heads) for rank in range(n)]
    rank_caches = [[[c[..., h, :].clone() for c in kind] for h in heads] for kind in caches]
    inputs = _step_inputs(tokens_per_row, g.vocab, 3)
    whole = reference_step(g, pack_hf_state_dict(sd, g, torch.bfloat16, quant=quant), *caches, *inputs,
                           tokens_per_row)
    ranks = [pack_hf_state_dict(shard_state_dict(sd, g, tp, rank, quant), r, torch.bfloat16, quant=quant)
             for rank in range(n)]
    split = tensor_parallel_reference_step(g, tp, ranks, *rank_caches, *inputs, tokens_per_row)
    assert split.shape == whole.shape == (3 * tokens_per_row, g.vocab)
    assert torch.allclose(split, whole, rtol=1e-9, atol=1e-9), (split - whole).abs().max()
    for kind, ranked in zip(caches, rank_caches):
        for rank, h in enumerate(heads):
            for layer in range(g.layers):  # bf16 of the same float64 values up to the summation order
                assert torch.allclose(ranked[rank][layer].float(), kind[layer][..., h, :].float(), rtol=2**-7,
                                      atol=1e-6)
