"""Random decode cases for a package: weights, a paged KV cache and a step's inputs, on the GPU.

Shared by ``monobuild bench`` and the GPU tests, so both time and check the same thing: random
weights scaled like a trained model's, a KV cache of random values (never zeros, which hide
unwritten outputs and run faster than real data), block tables that scatter each row's pages
over the whole cache, and per-row contexts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..runtime.buffers import Sampling, StepInputs
from ..runtime.kvcache import KVCache
from .checkpoints import random_hf_state_dict


@dataclass(frozen=True)
class DecodeCase:
    inputs: StepInputs
    tokens_per_row: int

    @property
    def rows(self) -> int:
        return self.inputs.context_lens.shape[0]


def random_state_dict(package, seed: int) -> dict:
    """Random HF-named weights for ``package``: an FP8 package's projections (and experts)
    quantized as its checkpoint format stores them."""
    gen = torch.Generator(device=package.device).manual_seed(seed)
    return random_hf_state_dict(package.geometry, package.dtype, gen, package.quant)


def random_kv_cache(package, num_blocks: int, seed: int) -> KVCache:
    gen = torch.Generator(device=package.device).manual_seed(seed)
    cache = package.allocate_kv_cache(num_blocks)
    for t in cache.k + cache.v:
        t.copy_(torch.randn(t.shape, generator=gen, device=t.device))
    return cache


def blocks_needed(package, rows: int, context: int) -> int:
    return rows * -(-context // package.block_size)


def random_case(package, contexts: list[int], tokens_per_row: int, num_blocks: int, seed: int) -> DecodeCase:
    """Inputs for rows with the given contexts (this step's tokens included; 0 = a padding row).

    Each live row's pages are distinct blocks drawn at random from the whole cache.
    """
    gen = torch.Generator().manual_seed(seed)
    bs, rows = package.block_size, len(contexts)
    pages = max(1, -(-max(contexts) // bs))
    if rows * pages > num_blocks:
        raise ValueError(f"{rows} rows × {pages} pages do not fit {num_blocks} blocks")
    tables = torch.randperm(num_blocks, generator=gen)[: rows * pages].view(rows, pages).to(torch.int32)
    positions = torch.cat([torch.arange(c - tokens_per_row, c) if c else torch.zeros(tokens_per_row, dtype=torch.long)
                           for c in contexts]).to(torch.int32)
    ids = torch.randint(0, package.geometry.vocab, (rows * tokens_per_row,), generator=gen, dtype=torch.int32)
    dev = package.device
    inputs = StepInputs(ids.to(dev), positions.to(dev), tables.to(dev),
                        torch.tensor(contexts, dtype=torch.int32, device=dev), _sampling(package, rows, gen))
    return DecodeCase(inputs, tokens_per_row)


def _sampling(package, rows: int, gen: torch.Generator) -> Sampling | None:
    """A sampling head's settings for the bench and tests: every row drawn at temperature 1 from
    its whole distribution (one rejection round), each with a seed of its own."""
    if package.manifest.deployment.head != "sample":
        return None
    dev = package.device
    return Sampling(torch.ones(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev),
                    torch.ones(rows, device=dev), torch.randint(0, 2**62, (rows,), generator=gen).to(dev))


def random_band_step(package, band: str, context: int, mode: str, seed: int = 0):
    """A step of ``package`` in ``mode`` over random weights and cache, and inputs for the band
    named ``band`` (r<rows>t<tokens>) with every row at ``context``: (step, inputs, rows, tokens)."""
    rows, tokens = (int(x) for x in band[1:].split("t"))
    blocks = blocks_needed(package, rows, context)
    step = package.bind(random_state_dict(package, seed), random_kv_cache(package, blocks, seed), mode)
    return step, random_case(package, [context] * rows, tokens, blocks, seed).inputs, rows, tokens


def poison_past_context(caches, block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
                        window: int = 0, tokens: int = 1) -> None:
    """NaN into every slot of each live row's last page past its context (after this step's tokens),
    and with a sliding window into every position before the first its step's queries see.

    A serving engine's cache holds stale or never-written values there (an engine may free and
    reuse the pages that left the window); a program that loads them into its arithmetic (NaN ×
    a zero softmax weight is NaN) shows up as NaN logits.
    """
    for b, ctx in enumerate(context_lens.tolist()):
        if ctx == 0:
            continue
        if ctx % block_size:
            block = int(block_tables[b, ctx // block_size])
            for t in caches:
                t[block, ctx % block_size:] = float("nan")
        for pos in range(max(0, ctx - tokens - window + 1) if window else 0):
            for t in caches:
                t[int(block_tables[b, pos // block_size]), pos % block_size] = float("nan")
