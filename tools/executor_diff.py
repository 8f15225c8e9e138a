"""Which op of a layer program computes something else than the other mode's: layer 0 region by region.

Both modes of a package run the same ops over the same regions; where the persistent program is
another executor's (the streaming one) than the staged programs' (Triton), a wrong result shows
first in the region its faulty op writes. This runs the band's step in both modes over the same
weights, KV cache and inputs, then the embedding and decoder layer 0 alone again in each, and
prints every scratch region layer 0 wrote and the hidden state it hands on, with the relative
difference between the modes (rounding differs: bf16 activations one ulp apart are ~4e-3)::

    python tools/executor_diff.py PACKAGE [--band r1t1] [--context 1024]
"""

from __future__ import annotations

import argparse

import torch

from monobuild import runtime
from monobuild.bench.cases import blocks_needed, random_case, random_kv_cache, random_state_dict


def _layer0(package, weights, cache, inputs, mode: str, rows: int, tokens: int) -> dict[str, torch.Tensor]:
    """The regions of layer 0 after the embedding and layer 0 run alone (a whole step first binds the inputs)."""
    step = package.bind(weights, cache, mode)
    band = step.band_for(rows, tokens)
    given = band.prepare(inputs.tokens, inputs.positions, inputs.block_tables, inputs.context_lens, package.device)
    stream = torch.cuda.current_stream().cuda_stream
    band.run(given, stream)
    for t in band.buffers.scratch.values():
        t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)
    for launch, spec in zip(band.launches, band.spec.launches):  # the embedding, then layer 0's launches
        if spec.layer not in (None, 0):
            break
        launch.kernel.launch(stream, launch.params.address)
    torch.cuda.synchronize()
    out = {name: t.clone() for name, t in band.buffers.scratch.items()}
    out["x_out (layer 0)"] = band.buffers.act[1].clone()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package")
    ap.add_argument("--band", default="r1t1")
    ap.add_argument("--context", type=int, default=1024)
    args = ap.parse_args()
    pkg = runtime.load(args.package)
    rows, tokens = (int(x) for x in args.band[1:].split("t"))
    blocks = blocks_needed(pkg, rows, args.context)
    weights = pkg.bind_weights(random_state_dict(pkg, 1))
    inputs = random_case(pkg, [args.context] * rows, tokens, blocks, 1).inputs
    got = {}
    for mode in ("staged", "persistent"):
        got[mode] = _layer0(pkg, weights, random_kv_cache(pkg, blocks, 1), inputs, mode, rows, tokens)
    programs = {p.name: p for p in pkg.manifest.programs}
    print(f"{args.package} {args.band} context {args.context}: persistent "
          f"{programs[f'layer.{args.band}.persistent'].executor} against staged "
          f"{programs[f'layer.{args.band}.qkv'].executor}")
    for name, staged in got["staged"].items():
        ours = got["persistent"][name]
        if not staged.is_floating_point():
            print(f"  {name:18s} {'equal' if torch.equal(staged, ours) else 'DIFFER'}")
            continue
        unwritten = int(torch.isnan(ours).sum()) - int(torch.isnan(staged).sum())
        both = ~torch.isnan(staged) & ~torch.isnan(ours)
        a, b = ours[both].double(), staged[both].double()
        rel = ((a - b).norm() / b.norm().clamp_min(1e-30)).item() if both.any() else float("nan")
        print(f"  {name:18s} rel {rel:.2e}   elements only one mode wrote: {unwritten:+d}")


if __name__ == "__main__":
    main()
