"""Correctness on a GPU against transformers: a package's decode steps vs the HF model, step by step.

For each model: a random-weight transformers model built from the recipe's config.json (nothing
downloaded) in the package's 16-bit dtype (bf16, or fp16 for an fp16 package; named bf16 below), and
the same weights in float32 as the reference. For an FP8 package the
random weights are an FP8 checkpoint's (E4M3 and block scales): the package binds them as they
are, both transformers models get them dequantized. Each row's prompt is
prefilled by both; the bf16 model's cache is copied into the paged KV cache; then every step
feeds all three the reference's greedy token (teacher forcing, so their logits stay comparable)
and compares:

- logits: ‖ours − ref‖ / ‖ref‖ ≤ 1.5 × ‖bf16 transformers − ref‖ / ‖ref‖, per step;
- greedy ids: equal to the reference's wherever its top-2 margin exceeds the largest absolute
  logit error of either bf16 implementation at that step.

For a routed (mixture-of-experts) model a step is judged by the logits bound where our programs
chose, in every routed layer, the experts the reference chose (the union over the band's rows:
``step.routed``). Where they chose otherwise, the layer tells which kind of difference it is: a
choice within bf16's reach (somewhere in the layer, the reference's gap between a row's k-th and
(k+1)-th router logit is at most twice the largest difference between the bf16 model's router
logits and the reference's) is a discrete coin toss that transformers' bf16 model makes as well,
and a per-step ratio would compare coin tosses: those steps are counted apart, with their ratio
shown. A different choice where every row's was decided fails the run. Where no step routed
alike (many rows and layers make a coin toss somewhere in each step), every step is held to the
bound. Greedy ids are held to the
rule above at every step.

Both program modes run side by side (each with its own KV cache). Usage::

    python tools/transformers_check.py --packages DIR [--models llama-3.2-1b,qwen3-0.6b] [--steps 128]
        [--rows 1,5,8] [--max-context 4096] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from monobuild import runtime
from monobuild.bench.cases import random_state_dict
from monobuild.bench.hf import batched_cache, fill_paged, hf_model, prefill

REPO = Path(__file__).resolve().parent.parent
RATIO_BOUND = 1.5


def check_model(package_dir: Path, rows_list: list[int], steps: int, max_context: int, seed: int,
                configs: Path = REPO / "recipes" / "configs") -> dict:
    pkg = runtime.load(package_dir)
    sd = random_state_dict(pkg, seed)
    config_json = configs / f"{pkg.manifest.recipe.rsplit('-', 1)[0]}.json"
    framework = torch.float16 if pkg.dtype == torch.float16 else torch.bfloat16  # an FP8 package's is bf16
    bf16 = hf_model(config_json, sd, framework, pkg.device, pkg.quant)
    ref = hf_model(config_json, sd, torch.float32, pkg.device, pkg.quant)
    bound = sd if pkg.quant else bf16.state_dict()  # an FP8 package binds the checkpoint's own tensors
    bs, vocab = pkg.block_size, pkg.geometry.vocab
    result = {"package": str(package_dir), "modes": list(pkg.modes), "framework_dtype": str(framework), "runs": []}
    gen = torch.Generator().manual_seed(seed)
    for rows in rows_list:
        t0 = time.time()
        lengths = torch.randint(16, max_context - steps, (rows,), generator=gen).tolist()
        lengths[0] = max_context - steps  # one row reaches max_context
        prompts = [torch.randint(0, vocab, (n,), generator=gen).to(pkg.device) for n in lengths]
        pages = -(-max_context // bs)
        tables = torch.randperm(rows * pages, generator=gen).view(rows, pages).to(torch.int32).to(pkg.device)
        with torch.no_grad():
            bf_caches, _ = prefill(bf16, prompts)
            ref_caches, ref_last = prefill(ref, prompts)
            steps_by_mode, kv_by_mode = {}, {}
            for mode in pkg.modes:
                kv_by_mode[mode] = pkg.allocate_kv_cache(rows * pages)
                fill_paged(kv_by_mode[mode], bf_caches, tables, lengths)
                steps_by_mode[mode] = pkg.bind(bound, kv_by_mode[mode], mode)
            bf_cache, bf_mask = batched_cache(bf_caches)
            ref_cache, ref_mask = batched_cache(ref_caches)
            del bf_caches, ref_caches
            token = ref_last.argmax(-1)
            base = torch.tensor(lengths, device=pkg.device)
            per_step = []
            routed = pkg.geometry.experts is not None
            ref_router, bf_router = router_logits(ref), router_logits(bf16)
            for t in range(steps):
                pos = base + t
                one = torch.ones(rows, 1, dtype=torch.long, device=pkg.device)
                bf_mask, ref_mask = torch.cat([bf_mask, one], 1), torch.cat([ref_mask, one], 1)
                kwargs = dict(input_ids=token[:, None], position_ids=pos[:, None], use_cache=True)
                ref_out = ref(**kwargs, attention_mask=ref_mask, past_key_values=ref_cache)
                bf_out = bf16(**kwargs, attention_mask=bf_mask, past_key_values=bf_cache)
                ref_logits, bf_logits = ref_out.logits[:, 0].double(), bf_out.logits[:, 0].double()
                record = {"step": t, "context": [int(c) + 1 for c in pos.tolist()]}
                reach = routing_reach(ref_router, bf_router, pkg.geometry.experts.top_k) if routed else None
                bf_err = (bf_logits - ref_logits).norm() / ref_logits.norm()
                record["bf16_rel_err"] = bf_err.item()
                top2 = ref_logits.topk(2, -1).values
                margin = top2[:, 0] - top2[:, 1]
                want = ref_logits.argmax(-1)
                for mode, step in steps_by_mode.items():
                    ids = step(token.to(torch.int32), pos.to(torch.int32), tables, (pos + 1).to(torch.int32))
                    ours = step.logits.double()
                    err = (ours - ref_logits).norm() / ref_logits.norm()
                    worst = torch.maximum((ours - ref_logits).abs().amax(-1), (bf_logits - ref_logits).abs().amax(-1))
                    decided = margin > worst
                    record[mode] = {"rel_err": err.item(), "ratio": (err / bf_err).item(),
                                    "ids_decided": int(decided.sum()),
                                    "ids_wrong": int((ids.long() != want)[decided].sum()),
                                    "routing": routing_agreement(step.routed, reach) if routed else "same"}
                per_step.append(record)
                token = want
        run = summarize(rows, lengths, per_step, pkg.modes)
        run["seconds"] = round(time.time() - t0, 1)
        result["runs"].append(run)
        print_run(pkg.manifest.recipe, run, "fp16" if framework == torch.float16 else "bf16")
        del steps_by_mode, kv_by_mode, bf_cache, ref_cache
        torch.cuda.empty_cache()
    return result


def router_logits(model) -> list:
    """The router logits of the model's last forward, per routed layer in layer order, filled by
    hooks on each routed layer's ``mlp.gate`` (transformers 5.17's routers return their logits
    first). ``output_router_logits`` would give them too, but then also computes the load-balancing
    loss, which fails on a decode step of a padded batch."""
    gates = [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "experts")]
    seen: list = [None] * len(gates)

    def keep(index):
        return lambda module, args, out: seen.__setitem__(index, out[0] if isinstance(out, tuple) else out)

    for index, gate in enumerate(gates):
        gate.register_forward_hook(keep(index))
    return seen


def routing_reach(ref_router: tuple, bf_router: tuple, top_k: int) -> list[tuple[set[int], bool]]:
    """Per routed layer: the experts the reference's rows chose (their union), and whether some row's
    choice was within bf16's reach (its k-th and (k+1)-th reference logits no further apart than
    twice the largest difference between the bf16 model's router logits and the reference's)."""
    layers = []
    for ref_layer, bf_layer in zip(ref_router, bf_router):
        ref_layer, bf_layer = ref_layer.double(), bf_layer.double()
        top = ref_layer.topk(top_k + 1, -1)
        gap = top.values[:, top_k - 1] - top.values[:, top_k]
        within = bool((gap <= 2 * (bf_layer - ref_layer).abs().amax(-1)).any())
        layers.append(({int(e) for e in top.indices[:, :top_k].flatten()}, within))
    return layers


def routing_agreement(ours: dict[int, torch.Tensor], reach: list[tuple[set[int], bool]]) -> str:
    """"same" where our programs chose the reference's experts in every routed layer; else
    "within reach" where every layer that chose otherwise was within bf16's reach, "decided"
    where one was not."""
    verdict = "same"
    for (_, record), (chosen, within) in zip(sorted(ours.items()), reach):
        count = int(record[0])
        if {int(e) for e in record[1:1 + count]} != chosen:
            if not within:
                return "decided"
            verdict = "within reach"
    return verdict


def summarize(rows: int, lengths: list[int], per_step: list[dict], modes) -> dict:
    """Per mode, the worst and median ratios over the steps that routed as the reference did (every
    step of a dense model; every step, where none did), its greedy ids over every step."""
    run = {"rows": rows, "prompt_lengths": lengths, "steps": len(per_step),
           "max_context": max(max(r["context"]) for r in per_step),
           "bf16_rel_err_max": max(r["bf16_rel_err"] for r in per_step), "modes": {}, "per_step": per_step}
    for mode in modes:
        judged = [r[mode] for r in per_step if r[mode]["routing"] == "same"]
        apart = [r[mode] for r in per_step if r[mode]["routing"] == "within reach"]
        if not judged:  # no step routed alike (many rows × layers: one coin toss in each): hold every step
            judged, apart = apart, []
        flipped = sum(r[mode]["routing"] == "decided" for r in per_step)
        ratios = sorted(m["ratio"] for m in judged)
        run["modes"][mode] = {
            "rel_err_max": max((m["rel_err"] for m in judged), default=None),
            "ratio_max": ratios[-1] if ratios else None,
            "ratio_median": ratios[len(ratios) // 2] if ratios else None,
            "steps_routed_apart": len(apart), "ratio_max_routed_apart": max((m["ratio"] for m in apart), default=None),
            "steps_routed_otherwise_where_decided": flipped,
            "ids_decided": sum(r[mode]["ids_decided"] for r in per_step),
            "ids_wrong": sum(r[mode]["ids_wrong"] for r in per_step),
            "pass": bool(ratios) and ratios[-1] <= RATIO_BOUND and flipped == 0
                    and all(r[mode]["ids_wrong"] == 0 for r in per_step),
        }
    return run


def print_run(recipe: str, run: dict, framework: str) -> None:
    for mode, m in run["modes"].items():
        apart = (f" [{m['steps_routed_apart']} of {run['steps']} steps routed apart within bf16's reach: ratio "
                 f"max there {m['ratio_max_routed_apart']:.2f}]" if m["steps_routed_apart"] else "")
        flipped = m["steps_routed_otherwise_where_decided"]
        otherwise = f" [{flipped} steps routed otherwise where decided]" if flipped else ""
        judged = (f"err max {m['rel_err_max']:.2e} ({framework} HF {run['bf16_rel_err_max']:.2e}) "
                  f"ratio max {m['ratio_max']:.2f} median {m['ratio_median']:.2f}"
                  if m["ratio_max"] is not None else "no step judged")
        print(f"{recipe:22} rows {run['rows']} ctx≤{run['max_context']:5} {mode:10} {judged}{apart}{otherwise} "
              f"ids {m['ids_decided'] - m['ids_wrong']}/{m['ids_decided']} decided equal  "
              f"{'PASS' if m['pass'] else 'FAIL'}  ({run['seconds']} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packages", type=Path, required=True, help="directory holding <recipe>/sm_90 packages")
    ap.add_argument("--models", default="llama-3.2-1b,qwen3-0.6b,qwen3-8b")
    ap.add_argument("--rows", default="1,5,8")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--max-context", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--configs", type=Path, default=REPO / "recipes" / "configs",
                    help="directory holding <model>.json (the models' config.json files)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float32, not tf32
    results = []
    for model in args.models.split(","):
        results.append(check_model(args.packages / f"{model}-sm_90" / "sm_90", [int(r) for r in args.rows.split(",")],
                                   args.steps, args.max_context, args.seed, args.configs))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    ok = all(m["pass"] for r in results for run in r["runs"] for m in run["modes"].values())
    print("ALL PASS" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
