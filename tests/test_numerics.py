"""The staged programs — and the persistent ones, planned for one CTA — under Triton's CPU
interpreter match the float64 reference.

Tiny geometries (hidden 256, 2 layers, GQA 4:1, Llama-like with llama3 RoPE, a Qwen3-like with
q/k norm, a Mistral-like with a sliding window), 1..8 rows with different contexts, a dead
(padding) row, a speculative verify band, and
qkv/o/down split over K (the hidden state then travels as partial sums), attention splits
long enough for the long KV tile beside ones that walk the short tile, and the GEMVs' register
double-buffer beside the shipped pipeline (one loop over a CTA's tasks × K chunks; every CTA
has several tasks in the tiny geometries), every CTA staging its own x̂ (one row a load or
several) beside the RMSNorms as stages of their own (the shipped default).
Fresh random weights, caches and inputs per case; every scratch and output buffer poisoned with
NaN first. Bounds: fp32 ≤ 1e-4 and bf16 ≤ 1e-2 relative error of the logits (bf16 rounding of
one activation is 2⁻⁹ ≈ 2e-3; a few such roundings per layer stay well under 1e-2).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    ("tiny-llama.json", "fp32", 1, 1, [77]),
    # a GQA group of 3 (Qwen2.5's and Llama-3.2-3B's are 6, 7 and 3): the query rows pad to a power of two
    ("tiny-qwen2-gqa3.json", "fp32", 2, 1, [77, 0]),
    ("tiny-qwen2-gqa3.json", "bf16", 1, 6, [130]),
    ("tiny-llama.json", "bf16", 8, 1, [37, 0, 130, 5, 16, 64, 200, 1]),
    ("tiny-qwen3.json", "fp32", 4, 1, [100, 3, 0, 511]),
    ("tiny-qwen3.json", "bf16", 2, 1, [0, 250]),
    ("tiny-llama.json", "bf16", 2, 3, [40, 0]),
    ("tiny-qwen3.json", "fp32", 1, 6, [300]),
    # qkv, o and down split over K (their partials summed by the readers): 16 SMs, 64-column chunks
    ("tiny-llama.json", "fp32", 2, 1, [90, 17], "split_k"),
    ("tiny-qwen3.json", "bf16", 1, 6, [200], "split_k"),
    # a long row's splits walk long KV tiles, a short row's short ones, in one step
    ("tiny-llama.json", "fp32", 2, 1, [300, 40], "long_kv"),
    ("tiny-qwen3.json", "bf16", 2, 1, [45, 400], "long_kv"),
    # …in sub-tiles, one online-softmax state each (merged after the walk)
    ("tiny-llama.json", "fp32", 2, 1, [300, 40], "long_kv_sub"),
    ("tiny-qwen3.json", "bf16", 2, 1, [45, 400], "long_kv_sub"),
    # …and with 8 splits of 4 pages over 25, the row's last split walks long tiles over nothing
    # (it still attends to the step's own token), with and without sub-tiles
    ("tiny-llama.json", "fp32", 1, 1, [400], "long_kv_empty"),
    ("tiny-llama.json", "fp32", 1, 1, [400], "long_kv_empty_sub"),
    # the GEMVs' register double-buffer instead of the shared-memory pipeline
    ("tiny-llama.json", "fp32", 2, 1, [70, 9], "register_pipeline"),
    # x̂ staged by every CTA itself (no norm stages), eight rows per load (the 8-row case fills a
    # block, the 6-row one leaves it part masked) or one
    ("tiny-llama.json", "bf16", 8, 1, [90, 3, 0, 41, 200, 16, 5, 77], "cta_staging"),
    ("tiny-qwen3.json", "fp32", 1, 6, [120], "cta_staging"),
    ("tiny-llama.json", "fp32", 8, 1, [12, 140, 0, 33, 7, 260, 64, 2], "norm_rows"),
    ("tiny-qwen3.json", "bf16", 1, 6, [150], "norm_rows"),
    # the RMSNorms as stages of their own (a split K too: x_in and x1 arrive as partials)
    ("tiny-llama.json", "fp32", 8, 1, [12, 140, 0, 33, 7, 260, 64, 2], "norm_stages"),
    ("tiny-qwen3.json", "bf16", 1, 6, [150], "norm_stages"),
    # a logits head (no greedy ids): norm and logits, two launches
    ("tiny-llama.json", "fp32", 2, 1, [60, 11], "logits_head"),
    # the persistent programs on one CTA (their waits and signals, the epochs of two steps: each
    # step runs twice), the first stage a norm stage or qkv staging x̂ itself
    ("tiny-llama.json", "fp32", 2, 1, [70, 0], "persistent"),
    ("tiny-qwen2-gqa3.json", "bf16", 2, 1, [50, 300], "persistent"),
    ("tiny-qwen3.json", "bf16", 1, 6, [90], "persistent"),
    ("tiny-llama.json", "bf16", 2, 1, [33, 120], "persistent_cta_staging"),
    # sliding-window attention (Mistral v0.1's, here 40 positions): rows past the window, one whose
    # window starts one position into its first page, a verify band whose queries' windows differ
    ("tiny-mistral-window.json", "fp32", 4, 1, [130, 20, 0, 41]),
    ("tiny-mistral-window.json", "bf16", 1, 6, [200]),
    ("tiny-mistral-window.json", "fp32", 2, 1, [300, 57], "persistent"),
    # head_dims that are not powers of two (48 and 80; the attention pads them to 64 and 128): staged,
    # a verify band, K splits, the persistent program, the long-tile walk in sub-streams
    ("tiny-llama-hd48.json", "fp32", 2, 1, [77, 0]),
    ("tiny-qwen3-hd80.json", "bf16", 1, 6, [130]),
    ("tiny-qwen3-hd80.json", "fp32", 2, 1, [90, 17], "split_k"),
    ("tiny-llama-hd48.json", "bf16", 2, 1, [50, 300], "persistent"),
    ("tiny-qwen3-hd80.json", "bf16", 2, 1, [45, 400], "long_kv_sub"),
    # a GQA group of 16 in a 1 × 6 verify band: 96 query rows a task (Qwen3-235B-A22B's), padded to 128
    ("tiny-qwen3-gqa16.json", "bf16", 1, 6, [140]),
    ("tiny-qwen3-gqa16.json", "fp32", 1, 6, [70], "persistent"),
    # FP8 checkpoints (block-scaled E4M3 projections, 32×64 and 64×128 blocks): the shipped
    # pipeline, the register double-buffer, K splits, the persistent program
    ("tiny-qwen3-fp8.json", "bf16", 2, 1, [60, 200]),
    ("tiny-qwen3-fp8.json", "bf16", 2, 1, [70, 9], "register_pipeline"),
    ("tiny-llama-fp8.json", "bf16", 1, 6, [130], "split_k"),
    ("tiny-llama-fp8.json", "bf16", 2, 1, [33, 120], "persistent"),
    # 128-row scale blocks: k and v (64 rows each) end in a partial block of their own
    ("tiny-llama-fp8-128.json", "bf16", 2, 1, [50, 77]),
    # a sampling head: rows greedy, by temperature, within top-k, top-p or both; staged and persistent
    ("tiny-llama.json", "fp32", 4, 1, [77, 30, 130, 20], "sample"),
    ("tiny-qwen3.json", "bf16", 2, 1, [60, 200], "sample_persistent"),
    # …and in a verify band: each token row's draw, the verdict over the drawn ids
    ("tiny-llama.json", "fp32", 2, 3, [90, 41], "sample"),
    # …deciding by the proposer's distributions (verify.draft_probs): the speculative-sampling
    # rule over every id and within top-k, a greedy row; staged and persistent
    ("tiny-llama.json", "fp32", 3, 4, [90, 41, 66], "draft_probs"),
    ("tiny-qwen3.json", "fp32", 2, 4, [60, 130], "draft_probs_persistent"),
    # an fp16 checkpoint's package: weights, activations and KV cache in fp16
    ("tiny-qwen3.json", "fp16", 2, 1, [70, 33]),
    # routed (mixture-of-experts) layers: Qwen3-MoE with a dense layer between two routed ones (two
    # layer programs), a dead row, a verify band, K-split routers; Mixtral (top 2 of 8); staged and
    # persistent
    ("tiny-qwen3-moe.json", "fp32", 4, 1, [77, 0, 130, 9]),
    ("tiny-qwen3-moe.json", "bf16", 8, 1, [37, 0, 130, 5, 16, 64, 200, 1]),
    ("tiny-qwen3-moe.json", "bf16", 1, 6, [120]),
    ("tiny-qwen3-moe.json", "fp32", 2, 1, [90, 17], "split_k"),
    ("tiny-qwen3-moe.json", "fp32", 2, 1, [70, 0], "persistent"),
    ("tiny-mixtral.json", "bf16", 2, 3, [40, 90]),
    ("tiny-mixtral.json", "fp32", 2, 1, [50, 300], "persistent"),
    # …whose router ties every expert: each live row chooses the lowest-indexed ones
    ("tiny-qwen3-moe.json", "fp32", 2, 1, [60, 25], "router_tie"),
    ("tiny-qwen3-moe.json", "bf16", 2, 1, [33, 0], "router_tie_persistent"),
    # an FP8 checkpoint's routed layers (32 × 64 blocks, each expert's own): its experts' GEMVs
    # scale their products by the chosen expert's blocks; staged, a verify band, persistent
    ("tiny-qwen3-moe-fp8.json", "bf16", 4, 1, [77, 0, 130, 9]),
    ("tiny-qwen3-moe-fp8.json", "bf16", 1, 6, [120], "split_k"),
    ("tiny-qwen3-moe-fp8.json", "bf16", 2, 1, [70, 33], "persistent"),
]
BOUND = {"fp32": 1e-4, "bf16": 1e-2, "fp16": 1e-2 / 8}  # fp16: bf16's, less its 3 more mantissa bits
TOP_K = {"tiny-qwen3-moe.json": 4, "tiny-qwen3-moe-fp8.json": 4, "tiny-mixtral.json": 2}  # experts a token row chooses
KV_BOUND = {"fp32": 1e-6, "bf16": 2**-7, "fp16": 2**-10}  # one rounding of the new K/V, relative to the cache's max


@pytest.mark.parametrize("config,dtype,rows,tokens,context_lens,variant", [c if len(c) == 6 else (*c, "") for c in CASES],
                         ids=[f"{c[0].split('.')[0]}-{c[1]}-r{c[2]}t{c[3]}" + (f"-{c[5]}" if len(c) == 6 else "")
                              for c in CASES])
def test_interpreted_step_matches_reference(config, dtype, rows, tokens, context_lens, variant, tmp_path):
    case = {"config": config, "dtype": dtype, "rows": rows, "tokens": tokens, "context_lens": context_lens,
            "seed": int.from_bytes(os.urandom(4), "little"), "variant": variant}
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "numerics_worker.py"), json.dumps(case),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["unwritten_logits"] == 0, f"{case}: logits left poisoned"
    assert result["rel_err"] <= BOUND[dtype], f"{case}: {result}"
    assert result["ids_match"] is not False or dtype == "bf16", f"{case}: {result}"
    assert result["stray_kv_writes"] == [], f"{case}: KV slots written outside the live rows' new tokens"
    assert result["kv_rel_err"] <= KV_BOUND[dtype], f"{case}: {result}"
    if "samples_ok" in result:  # each row's draw is the reference's, given the same logits and uniforms
        assert result["samples_ok"] and result["samples_decided"] >= 1, f"{case}: {result}"
    if "verdict_ok" in result:  # a verify band: the verdict from the programs' own ids, and the drafts set to be accepted
        assert result["verdict_ok"], f"{case}: {result}"
        # the drafts set to be accepted are, where the ids are the reference's (every draw decided)
        same_ids = result["ids_match"] if result["ids_match"] is not None else result["samples_all_decided"]
        if "rule_verdicts" in result:  # the rule's row decided (the verdict's own reference checks its ids)
            assert result["rule_verdicts"], f"{case}: the speculative-sampling rule's row was not decided: {result}"
        else:
            assert result["accepted"] == result["accepted_wanted"] or not same_ids, f"{case}: {result}"
    if variant == "split_k":
        assert min(result["k_splits"]) > 1, f"{case}: the planner did not split qkv, o and down ({result['k_splits']})"
    for layer, record in result["routed"].items():  # a routed layer's record: how many experts, then which
        n, chosen = record[0], record[1:]
        assert 0 < n <= result["live_rows"] * TOP_K[config] and chosen[n:] == [-1] * (len(chosen) - n), record
        assert chosen[:n] == sorted(set(chosen[:n])), f"layer {layer}: slots not in expert order: {record}"
        if variant.startswith("router_tie"):  # every live row chose experts 0 … k − 1
            assert chosen[:n] == list(range(TOP_K[config])), f"layer {layer}: {record}"
        if result["routing_decided"]:  # the union of the reference's choices
            assert chosen[:n] == result["routed_wanted"][layer], f"layer {layer}: {record} {result['routed_wanted']}"
    assert result["routing_decided"], f"{case}: no case drawn whose routing the programs' rounding decides: {result}"
    if variant in ("norm_stages", "cta_staging", "norm_rows", "logits_head"):  # staged: one launch a stage
        want = {"norm_stages": (8, 3), "logits_head": (8, 2)}.get(variant, (6, 2))  # the layer's and the head's
        assert (result["layer_launches"], result["head_launches"]) == want, f"{case}: {result}"
    assert result["kv_substreams"] == (4 if variant.endswith("_sub") else 1), f"{case}: {result}"
    if variant.startswith("persistent"):
        assert result["repeat_err"] == 0.0, f"{case}: the second step differs ({result['repeat_err']})"
        # two steps, one CTA: each layer launch's edges signalled once a step (the embed has none)
        for edges, row in zip(result["layer_syncs"], result["layer_counters"]):
            assert row[:edges] == [2] * edges and not any(row[edges:]), result["layer_counters"]
    if variant in ("long_kv", "long_kv_sub"):
        short, long = result["kv_tiles"]
        pages = [-(-max(c - tokens, 0) // 16) for c in context_lens]  # 16-token blocks
        per_split = [-(-p // result["attn_splits"]) * 16 for p in pages]
        assert any(n >= long for n in per_split) and any(0 < n < long for n in per_split), \
            f"{case}: not one split of each kind ({per_split} cached tokens per split, tiles {short}/{long})"
    if variant in ("long_kv_empty", "long_kv_empty_sub"):
        long, splits = result["kv_tiles"][1], result["attn_splits"]
        pages = -(-(context_lens[0] - tokens) // 16)
        per_split = -(-pages // splits)
        assert per_split * 16 >= long and (splits - 1) * per_split >= pages, \
            f"{case}: no empty split that walks long tiles ({pages} pages, {splits} splits)"
