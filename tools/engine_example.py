"""A serving engine's decode loop over a package, as vLLM lays out a step: a pool of KV blocks,
each request's block table and sequence length, batches padded to the sizes captured in CUDA
graphs, the load policy asked once and the gate asked every step.

It runs on a GPU with a compiled Llama-3.2-1B package (random weights; nothing downloaded)::

    python tools/engine_example.py --package DIR/llama-3.2-1b-sm_90/sm_90 [--requests 11] [--new 32]

and checks each request's ids against transformers' greedy ``generate`` over the same weights,
row by row, up to the first id its top-2 margin does not decide (reported, not asserted: this is
an example; ``tests/test_integration_gpu.py`` holds the bound).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from monobuild.bench.cases import random_state_dict
from monobuild.bench.hf import hf_model
from monobuild.runtime.gate import EngineDeployment, Use, open_package
from monobuild.runtime.kvcache import write_positions

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Request:
    prompt: list[int]
    blocks: list[int] = field(default_factory=list)  # the request's block table (block ids in the pool)
    out: list[int] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        """Tokens in the KV cache: the prompt and every id but the last, which the next step feeds."""
        return len(self.prompt) + len(self.out) - 1


class BlockPool:
    def __init__(self, num_blocks: int):
        self.free = list(range(num_blocks - 1, -1, -1))

    def grow(self, request: Request, tokens: int, block_size: int) -> None:
        while len(request.blocks) * block_size < tokens:
            request.blocks.append(self.free.pop())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=REPO / "recipes" / "configs" / "llama-3.2-1b.json")
    ap.add_argument("--requests", type=int, default=11)
    ap.add_argument("--new", type=int, default=32)
    args = ap.parse_args()
    config = json.loads(args.config.read_text())

    # 1. At load: the engine's deployment against the package, under MONOBUILD_DECODE (auto by default).
    engine = EngineDeployment(config=config, dtype=torch.bfloat16, kv_dtype=torch.bfloat16, block_size=16,
                              max_context=4096)
    pkg = open_package(args.package, engine, Use.from_env())
    if pkg is None:
        print("the package is not used: the engine decodes on its own (the log line says why)")
        return 0
    model = hf_model(args.config, random_state_dict(pkg, seed=0), torch.bfloat16, pkg.device)
    model.generation_config.eos_token_id = None  # the config's end-of-sequence ids: no row ends early
    bs = engine.block_size
    max_blocks = -(-engine.max_context // bs)
    pool = BlockPool(args.requests * max_blocks)
    kv = pkg.allocate_kv_cache(args.requests * max_blocks)  # an engine passes its own KV tensors here
    step = pkg.bind(model.state_dict(), kv)

    # 2. One CUDA graph per captured batch size (the package's bands), over static input tensors.
    sizes = sorted({rows for rows, tokens in step.bands if tokens == 1})
    i32 = dict(dtype=torch.int32, device=pkg.device)
    static, graphs = {}, {}
    for size in sizes:
        s = dict(ids=torch.zeros(size, **i32), positions=torch.zeros(size, **i32),
                 block_tables=torch.zeros(size, max_blocks, **i32), seq_lens=torch.zeros(size, **i32))
        step(s["ids"], s["positions"], s["block_tables"], s["seq_lens"])  # warm-up (all rows padding: stores nothing)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s["next"] = step(s["ids"], s["positions"], s["block_tables"], s["seq_lens"])
        static[size], graphs[size] = s, graph

    # 3. Prefill by the engine's own model; its cache copied into each request's blocks.
    gen = torch.Generator().manual_seed(0)
    requests = [Request(torch.randint(0, pkg.geometry.vocab, (int(n),), generator=gen).tolist())
                for n in torch.randint(8, 400, (args.requests,), generator=gen)]
    with torch.no_grad():
        for r in requests:
            pool.grow(r, len(r.prompt), bs)
            out = model(torch.tensor([r.prompt], device=pkg.device), use_cache=True, logits_to_keep=1)
            table = torch.tensor(r.blocks, **i32)
            for layer, cached in enumerate(out.past_key_values.layers):
                write_positions(kv, layer, cached.keys[0], cached.values[0], table, len(r.prompt) - cached.keys.shape[2])
            r.out.append(int(out.logits[0, -1].argmax()))

    # 4. Decode: each step asks the gate, pads the batch to a captured size and replays its graph.
    widest = sizes[-1]
    for _ in range(args.new - 1):
        for first in range(0, len(requests), widest):  # a batch past the widest band: in several steps
            batch = requests[first:first + widest]
            longest = max(r.seq_len + 1 for r in batch)
            why = step.serves(len(batch), 1, longest)
            if why:  # an engine runs its own decode for this step; here every step is served
                raise SystemExit(f"not served: {why}")
            size = next(s for s in sizes if s >= len(batch))
            s = static[size]
            s["seq_lens"].zero_()  # padding rows: context 0
            for b, r in enumerate(batch):
                pool.grow(r, r.seq_len + 1, bs)  # the step writes this token's K/V at position seq_len
                s["ids"][b], s["positions"][b], s["seq_lens"][b] = r.out[-1], r.seq_len, r.seq_len + 1
                s["block_tables"][b, : len(r.blocks)] = torch.tensor(r.blocks, **i32)
            graphs[size].replay()
            for r, i in zip(batch, s["next"][: len(batch)].tolist()):
                r.out.append(i)
    print(f"{len(requests)} requests, {args.new} new ids each, in batches of up to {widest} rows")
    return compare_with_generate(model, requests, args.new)


def compare_with_generate(model, requests: list[Request], new: int) -> int:
    """Each request's ids against transformers' greedy generate, up to its first difference."""
    import transformers

    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=0,
                                           output_logits=True, return_dict_in_generate=True)
    for k, r in enumerate(requests):
        ids = torch.tensor([r.prompt], device=model.device)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        want = out.sequences[0, len(r.prompt):].tolist()
        same = next((j for j, (a, b) in enumerate(zip(r.out, want)) if a != b), new)
        note = "equal" if same == new else f"equal up to id {same}"
        if same < new:
            top2 = out.logits[same][0].float().topk(2).values
            note += f" (generate's top-2 margin there: {float(top2[0] - top2[1]):.3g})"
        print(f"request {k:2} prompt {len(r.prompt):3}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
