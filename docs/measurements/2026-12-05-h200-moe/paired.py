"""Time several builds of one routed model's package on the same weights, KV cache and inputs,
interleaved in rounds: the weights (61 GB for Qwen3-30B-A3B) are drawn once and bound in place by
every build. Prints, per round, build and band: the median step, the routed roofline (the timed
step's own experts) and its share.

    python paired.py CONTEXT ROUNDS PACKAGE...
"""

import statistics
import sys

import torch

from monobuild import runtime
from monobuild.bench.cases import blocks_needed, random_case, random_kv_cache, random_state_dict
from monobuild.bench.roofline import step_bytes
from monobuild.bench.run import copy_bandwidth, time_replays


def main(context: int, rounds: int, packages: list[str]) -> None:
    pkgs = [runtime.load(p) for p in packages]
    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; device-to-device copy {copy / 1e9:.0f} GB/s; context {context}")
    sd = random_state_dict(pkgs[0], seed=0)
    weights = [p.bind_weights(sd) for p in pkgs]
    bands = sorted({s.band for s in pkgs[0].manifest.steps}, key=lambda b: (b.tokens, b.rows))
    cases = {}
    for band in bands:
        blocks = blocks_needed(pkgs[0], band.rows, context)
        cases[band] = (random_kv_cache(pkgs[0], blocks, seed=context),
                       random_case(pkgs[0], [context] * band.rows, band.tokens, blocks, seed=context).inputs)
    for r in range(rounds):
        for name, pkg, w in zip(packages, pkgs, weights):
            for band in bands:
                cache, i = cases[band]
                step = pkg.bind(w, cache, "persistent")
                args = (i.tokens, i.positions, i.block_tables, i.context_lens)
                ms = statistics.median(time_replays(lambda step=step, args=args: step(*args), 100))
                selected = {layer: int(rec[0]) for layer, rec in step.routed.items()}
                roof = step_bytes(pkg.manifest, band, context, "persistent", selected) / copy * 1e3
                print(f"round {r} {name:40} {band.name} {ms:7.3f} ms  roofline {roof:6.3f} ms "
                      f"{100 * roof / ms:5.1f}%  experts {sum(selected.values()) / len(selected):5.1f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
