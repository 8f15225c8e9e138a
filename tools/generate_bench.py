"""End-to-end generation speed on a GPU: a package's decode (``monobuild.integrations.transformers``)
against transformers' own ``generate``, eager and with a static cache (which transformers
compiles with torch.compile, mode reduce-overhead, and replays in CUDA graphs).

The model is transformers' own, built from a config.json with random bf16 weights (nothing
downloaded); every implementation gets the same prompts (random ids, ``--prompt`` tokens a row)
and decodes greedily with no end-of-sequence id, so each row makes exactly ``--new`` tokens.
Each generate call is timed whole (wall clock, the device synchronised), the median of
``--repeats`` after a warm-up call (which, for the static cache, is the compile). The decode rate
is the tokens of all rows past the first, over the time past a one-token call's (and a step's time
that time over ``new − 1``)::

    rows × (new − 1) / (T(new) − T(1))

Usage (on the device machine)::

    python tools/generate_bench.py --package DIR/llama-3.2-1b-sm_90/sm_90 --config recipes/configs/llama-3.2-1b.json \\
        [--rows 1,8] [--prompt 128] [--new 256] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from monobuild import runtime
from monobuild.bench.cases import random_state_dict
from monobuild.bench.hf import hf_model
from monobuild.integrations.transformers import Decoder


def timed(fn, repeats: int) -> tuple[float, float]:
    """(the warm-up call's seconds, the median of ``repeats`` calls after it)."""
    def once() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    warm = once()
    return warm, statistics.median(once() for _ in range(repeats))


def hf_runner(model, prompts: torch.Tensor, new: int, static: bool):
    import transformers

    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=0)
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompts.shape[1] + 257) if static else None

    def run():
        if cache is not None:
            cache.reset()
        kwargs = {"past_key_values": cache} if cache is not None else {}
        out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config,
                             **kwargs)
        assert out.shape[1] == prompts.shape[1] + new
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", type=Path, required=True)
    ap.add_argument("--config", type=Path, required=True, help="the model's config.json")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.new > 256:
        ap.error("--new: at most 256 (the static cache is sized for it)")
    pkg = runtime.load(args.package)
    model = hf_model(args.config, random_state_dict(pkg, seed=0), torch.bfloat16, pkg.device)
    model.generation_config.eos_token_id = None  # the config's end-of-sequence ids: no row ends early
    decoder = Decoder(model, pkg)
    gen = torch.Generator().manual_seed(0)
    results = []
    print(f"{'rows':>4} {'implementation':34} {'first call s':>12} {'T(1) ms':>9} {'T(new) ms':>10} "
          f"{'decode tok/s':>12} {'ms/step':>8}", flush=True)
    for rows in (int(r) for r in args.rows.split(",")):
        prompts = torch.randint(0, pkg.geometry.vocab, (rows, args.prompt), generator=gen).to(pkg.device)
        runners = {
            f"monobuild ({decoder.mode})": lambda n, p=prompts: (lambda: decoder.generate(list(p), n)),
            "transformers generate, eager": lambda n, p=prompts: hf_runner(model, p, n, static=False),
            "transformers generate, static+compile": lambda n, p=prompts: hf_runner(model, p, n, static=True),
        }
        for name, make in runners.items():
            with torch.no_grad():
                warm1, t1 = timed(make(1), args.repeats)
                warm, tn = timed(make(args.new), args.repeats)
            rate = rows * (args.new - 1) / (tn - t1)
            row = {"rows": rows, "implementation": name, "prompt": args.prompt, "new": args.new,
                   "first_call_s": round(max(warm1, warm), 2), "t1_ms": round(t1 * 1e3, 2),
                   "tnew_ms": round(tn * 1e3, 2), "decode_tokens_per_s": round(rate, 1),
                   "ms_per_step": round((tn - t1) / (args.new - 1) * 1e3, 3)}
            results.append(row)
            print(f"{rows:>4} {name:34} {row['first_call_s']:>12} {row['t1_ms']:>9} {row['tnew_ms']:>10} "
                  f"{row['decode_tokens_per_s']:>12} {row['ms_per_step']:>8}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
