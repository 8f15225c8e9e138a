"""A plain PyTorch decode step over the packed weights and the paged KV cache: the reference the
programs are tested against (not runtime API).

It computes in ``compute_dtype`` (float64 by default) from the same weights the programs read
(an FP8 checkpoint's projections dequantized blockwise),
and writes the step's K/V into its own paged caches in the cache dtype, as the programs do.
Rows with context length 0 are padding: they write nothing to the KV cache and attend to
nothing (their attention output is zero), and in a routed layer choose no expert.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..parallel import TensorParallel
from ..runtime.rope import angles
from ..runtime.weights import PackedWeights
from ..schema import Experts, Geometry


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * torch.cat([cos, cos], -1) + rotated * torch.cat([sin, sin], -1)


@dataclass(frozen=True)
class Routed:
    """A live token row's routing in a routed layer: its chosen experts, and the gap between its
    k-th and (k+1)-th router logit (below the programs' rounding, they may choose otherwise)."""

    row: int
    chosen: tuple[int, ...]
    margin: float


def routed_mlp(xh: torch.Tensor, w, experts: Experts, live: torch.Tensor, routing: list | None = None) -> torch.Tensor:
    """A routed layer's MLP of the normed rows ``xh`` [m, hidden] in their dtype: each live row's
    top-k experts by the router's logits (ties to the lower index, as ``torch.topk`` takes them),
    weighted by the softmax over every expert taken there (renormalized over the chosen ones where
    the model says). ``routing`` gains each live row's ``Routed``."""
    cd = xh.dtype
    logits = xh @ w.w_router.to(cd).T
    probs = logits.softmax(-1)
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
    out = torch.zeros_like(xh)
    k, inter = experts.top_k, experts.intermediate
    for t in range(xh.shape[0]):
        if not live[t]:
            continue
        chosen = order[t, :k].tolist()
        if routing is not None:
            gap = float(logits[t, order[t, k - 1]] - logits[t, order[t, k]]) if k < experts.count else float("inf")
            routing.append(Routed(t, tuple(sorted(chosen)), gap))
        weight = probs[t, chosen]
        if experts.normalize:
            weight = weight / weight.sum()
        for j, wj in zip(chosen, weight):
            gate_up = w.experts("gate_up", j, cd) @ xh[t]
            h = torch.nn.functional.silu(gate_up[:inter]) * gate_up[inter:]
            out[t] += wj * (w.experts("down", j, cd) @ h)
    return out


def reference_step(geometry: Geometry, weights: PackedWeights, k_caches: list, v_caches: list, tokens: torch.Tensor,
                   positions: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor,
                   tokens_per_row: int, compute_dtype: torch.dtype = torch.float64,
                   routing: dict[int, list[Routed]] | None = None) -> torch.Tensor:
    """Logits [rows·tokens_per_row, vocab] of one step; the caches gain the live rows' new K/V.
    ``routing`` (a dict) gains each routed layer's rows' ``Routed``."""
    return tensor_parallel_reference_step(geometry, TensorParallel(1), [weights], [k_caches], [v_caches], tokens,
                                          positions, block_tables, context_lens, tokens_per_row, compute_dtype,
                                          routing)


def tensor_parallel_reference_step(geometry: Geometry, tp: TensorParallel, weights: list[PackedWeights],
                                   k_caches: list[list], v_caches: list[list], tokens: torch.Tensor,
                                   positions: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor,
                                   tokens_per_row: int, compute_dtype: torch.dtype = torch.float64,
                                   routing: dict[int, list[Routed]] | None = None) -> torch.Tensor:
    """``reference_step`` over ``tp.size`` ranks, each with its shard of the weights
    (``weights[rank]``, ``runtime.shards``) and of the KV caches (its KV heads): the embedding is
    the sum of the ranks' rows, each layer's o and MLP outputs the sum of the ranks' partials in
    rank order (the all-reduce), the logits the ranks' vocabulary rows side by side, less the
    padding. ``routing`` gains rank 0's record (the router is whole on every rank)."""
    if len(weights) != tp.size:
        raise ValueError(f"{len(weights)} ranks' weights for {tp.size} ranks")
    g, r = geometry, tp.rank_geometry(geometry)
    eps, cd = g.norm_eps, compute_dtype
    a = angles(g, positions.long().cpu()).to(cd).to(tokens.device)
    cos, sin = a.cos()[:, None, :], a.sin()[:, None, :]
    ids = tokens.long()
    x = sum(_embedding_rows(w.embed, ids, tp.vocab_range(g, rank)[0]).to(cd) for rank, w in enumerate(weights))
    for layer in range(g.layers):
        ranks = [w.layers[layer] for w in weights]
        xh = [_rms(x, w.attn_norm, eps) for w in ranks]
        x1 = x + sum(_attention(r, w, xh[rank], cos, sin, k_caches[rank][layer], v_caches[rank][layer], positions,
                                block_tables, context_lens, tokens_per_row, cd) @ w.projection("o", cd).T
                     for rank, w in enumerate(ranks))
        xh = [_rms(x1, w.mlp_norm, eps) for w in ranks]
        if g.is_moe(layer):
            live = context_lens.repeat_interleave(tokens_per_row) > 0
            record = routing.setdefault(layer, []) if routing is not None else None
            x = x1 + sum(routed_mlp(xh[rank], w, r.experts, live, record if rank == 0 else None)
                         for rank, w in enumerate(ranks))
            continue
        x = x1 + sum(_dense_mlp(xh[rank], w, cd) for rank, w in enumerate(ranks))
    logits = torch.cat([_rms(x, w.final_norm, eps) @ w.w_head.to(cd).T for w in weights], dim=-1)
    return logits[:, :g.vocab]


def _embedding_rows(embed: torch.Tensor, ids: torch.Tensor, start: int) -> torch.Tensor:
    """The rows of the ids a rank's embedding holds (ids ``start`` onwards, as many as it has
    rows); zeros for the others."""
    local = ids - start
    held = (local >= 0) & (local < embed.shape[0])
    return embed[local.clamp(0, embed.shape[0] - 1)] * held[:, None].to(embed.dtype)


def _attention(g: Geometry, w, xh: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kc: torch.Tensor,
               vc: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor,
               tokens_per_row: int, cd: torch.dtype) -> torch.Tensor:
    """The attention output [m, q_heads · head_dim] of the normed rows ``xh`` over ``g``'s heads
    (a rank's, under tensor parallelism); the caches ``kc``/``vc`` gain the live rows' K/V."""
    d, nq, nkv = g.head_dim, g.q_heads, g.kv_heads
    group, m = nq // nkv, xh.shape[0]
    block = kc.shape[1]
    rows = m // tokens_per_row
    qkv = xh @ w.projection("qkv", cd).T
    if w.b_q is not None:
        qkv = qkv + w.bias().to(cd)
    q = qkv[:, : nq * d].view(m, nq, d)
    k = qkv[:, nq * d: (nq + nkv) * d].view(m, nkv, d)
    v = qkv[:, (nq + nkv) * d:].view(m, nkv, d)
    if w.q_norm is not None:
        q, k = _rms(q, w.q_norm, g.norm_eps), _rms(k, w.k_norm, g.norm_eps)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    attn = torch.zeros(m, nq, d, dtype=cd, device=xh.device)
    for b in range(rows):
        if int(context_lens[b]) == 0:
            continue
        for j in range(tokens_per_row):
            t = b * tokens_per_row + j
            pos = int(positions[t])
            slot = int(block_tables[b, pos // block]), pos % block
            kc[slot] = k[t].to(kc.dtype)
            vc[slot] = v[t].to(vc.dtype)
        for j in range(tokens_per_row):
            t = b * tokens_per_row + j
            n = int(positions[t]) + 1
            lo = max(0, n - g.sliding_window) if g.sliding_window else 0  # transformers: key > query − window
            pages = block_tables[b, : -(-n // block)].long()
            keys = kc[pages].reshape(-1, nkv, d)[lo:n].to(cd)
            vals = vc[pages].reshape(-1, nkv, d)[lo:n].to(cd)
            keys, vals = keys.repeat_interleave(group, 1), vals.repeat_interleave(group, 1)
            scores = torch.einsum("hd,nhd->hn", q[t], keys) / d**0.5
            attn[t] = torch.einsum("hn,nhd->hd", scores.softmax(-1), vals)
    return attn.reshape(m, nq * d)


def _dense_mlp(xh: torch.Tensor, w, cd: torch.dtype) -> torch.Tensor:
    gate, up = (xh @ w.projection("gate_up", cd).T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ w.projection("down", cd).T


def greedy_verdict(next_ids: torch.Tensor, inputs: torch.Tensor, tokens_per_row: int) -> tuple[list[int], list[list[int]]]:
    """A verify band's greedy verdict from its ids: per row, how many leading drafts (input token
    j + 1, the draft for what token j predicts) equal the greedy ids, and the ids to emit (those
    drafts, then the id after them), −1 after them."""
    t = tokens_per_row
    ids, drafts = next_ids.view(-1, t).tolist(), inputs.view(-1, t).tolist()
    accepted, emitted = [], []
    for row_ids, row_in in zip(ids, drafts):
        n = 0
        while n < t - 1 and row_in[n + 1] == row_ids[n]:
            n += 1
        accepted.append(n)
        emitted.append(row_ids[: n + 1] + [-1] * (t - n - 1))
    return accepted, emitted


def allowed_ids(logit: np.ndarray, temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The sampling head's allowed set S for one token row, in float64: each id's membership (its
    more likely ids number fewer than top_k, 0: any, and hold less than top_p of the whole
    distribution) and its mass test's distance from the bound, relative to the total (inf where
    top_p ≥ 1: no such test)."""
    w = np.exp((logit - logit.max()) / temperature)
    total = w.sum()
    values, inverse, ties = np.unique(logit, return_inverse=True, return_counts=True)  # ascending
    mass_at = np.bincount(inverse, weights=w)
    above_count = np.cumsum(ties[::-1])[::-1] - ties  # the ids more likely than each value's
    above_mass = np.cumsum(mass_at[::-1])[::-1] - mass_at
    allowed_value = ((top_k <= 0) | (above_count < top_k)) & (above_mass < top_p * total)
    distance = np.abs(above_mass - top_p * total) / total if top_p < 1 else np.full(values.size, np.inf)
    return allowed_value[inverse], distance[inverse]


def allowed_distribution(logit: np.ndarray, temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, float]:
    """The sampling head's p for one token row, in float64: softmax(logit / temperature) over the
    allowed ids S (``allowed_ids``), renormalized; and the margin of S's boundary (the mass
    test's smallest distance from its bound)."""
    allowed, distance = allowed_ids(logit, temperature, top_k, top_p)
    p = np.where(allowed, np.exp((logit - logit.max()) / temperature), 0.0)
    return p / p.sum(), float(distance.min())


def proposal_verdict(logits: torch.Tensor, inputs: list[int], draft_probs: torch.Tensor, picks: list[int],
                     temperature: float, top_k: int, top_p: float, seed: int, positions: list[int],
                     verdict_round: int) -> tuple[int, list[int], float]:
    """One verify row's verdict by the sampling head's rule with the proposer's distributions, in
    float64 from the programs' fp32 logits [tokens, V], the row's input ids (token j + 1 the
    draft after token j), q [drafts, V], the head's own draws ``picks`` [tokens] and the same
    uniforms: (accepted, the ids to emit, the smallest margin a decision had: u·q(d) against
    p(d) relative to p(d), the allowed set's boundary, the correction's Gumbel maximum over its
    runner-up). Draft d is kept when u·q(d) < p(d), p the target's distribution over its
    allowed ids (``allowed_distribution``), else a draw from max(0, p − q) is emitted; a greedy
    row keeps d when it is its greedy id (``kernels/head``)."""
    tokens, vocab = logits.shape
    emitted, margin = [], float("inf")
    for j in range(tokens):
        if j == tokens - 1:  # the bonus id
            emitted.append(picks[j])
            break
        draft = inputs[j + 1]
        if temperature <= 0 or top_p <= 0:
            emitted.append(picks[j])
            if draft != picks[j]:
                break
            continue
        p, boundary = allowed_distribution(logits[j].double().numpy(), temperature, top_k, top_p)
        margin = min(margin, boundary)
        q = draft_probs[j].double().numpy()
        u = philox_uniforms(seed, positions[j], verdict_round, vocab)[draft]
        margin = min(margin, abs(u * q[draft] - p[draft]) / p[draft] if p[draft] > 0 else float("inf"))
        if u * q[draft] < p[draft]:
            emitted.append(draft)
            continue
        excess = p - q
        noise = philox_uniforms(seed, positions[j], verdict_round + 1, vocab)
        z = np.where(excess > 0, np.log(np.where(excess > 0, excess, 1.0)) - np.log(-np.log(noise)), -np.inf)
        x = int(np.argmax(z))
        margin = min(margin, float(z[x] - np.partition(z, -2)[-2]))
        emitted.append(x)
        break
    accepted = len(emitted) - 1
    return accepted, emitted + [-1] * (tokens - len(emitted)), margin


PHILOX_ROUND = (0xD2511F53, 0xCD9E8D57)
PHILOX_KEY = (0x9E3779B9, 0xBB67AE85)
MASK32 = 0xFFFFFFFF


def philox_uniforms(seed: int, position: int, round: int, vocab: int) -> np.ndarray:
    """The sampling head's uniforms for one row and round, one per vocabulary entry, in float64:
    Philox4x32-10 with key (seed's low, high words) and counter (v, position, round, 0), the first
    output word's top 23 bits plus a half, over 2²³ (as the programs compute them, exactly)."""
    c0 = np.arange(vocab, dtype=np.uint64)
    c1 = np.full(vocab, position & MASK32, dtype=np.uint64)
    c2 = np.full(vocab, round & MASK32, dtype=np.uint64)
    c3 = np.zeros(vocab, dtype=np.uint64)
    k0, k1 = np.uint64(seed & MASK32), np.uint64((seed >> 32) & MASK32)
    a, b, m32 = np.uint64(PHILOX_ROUND[0]), np.uint64(PHILOX_ROUND[1]), np.uint64(MASK32)
    for _ in range(10):
        p0, p2 = b * c2, a * c0  # 32 × 32 → 64-bit products, exact in uint64
        c0, c1, c2, c3 = (p0 >> np.uint64(32)) ^ c1 ^ k0, p0 & m32, (p2 >> np.uint64(32)) ^ c3 ^ k1, p2 & m32
        k0, k1 = (k0 + np.uint64(PHILOX_KEY[0])) & m32, (k1 + np.uint64(PHILOX_KEY[1])) & m32
    return ((c0 >> np.uint64(9)).astype(np.float64) + 0.5) / 2.0**23


def sample_reference(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
                     position: int) -> tuple[int, float]:
    """One row's draw by the sampling head's rule, in float64 from its fp32 logits and the same
    uniforms (``philox_uniforms``): the first draw over every id (Gumbel-max, round 0), kept where
    it is in the allowed set, else a draw over the allowed set alone (round 1); (the id, the
    smallest margin any of its decisions had: a Gumbel maximum over its runner-up, the mass
    test's distance from its bound; below fp32's rounding, the programs may decide otherwise)."""
    logit = logits.double().numpy()
    greedy = int(np.argmax(logit))
    if temperature <= 0 or top_p <= 0:
        return greedy, float("inf")
    best = logit.max()
    e = np.exp((logit - best) / temperature)
    total = e.sum()
    z = (logit - best) / temperature - np.log(-np.log(philox_uniforms(seed, position, 0, logit.size)))
    x = int(np.argmax(z))
    margin = float(z[x] - np.partition(z, -2)[-2])
    over = logit > logit[x]
    mass = e[over].sum()
    margin = min(margin, float(abs(mass - top_p * total) / total))
    if (top_k <= 0 or over.sum() < top_k) and mass < top_p * total:
        return x, margin
    # the second draw, over S: only the ids whose perturbed logit reaches the winner's could change
    # it by falling on the other side of S's boundary, so only their mass tests' margins count
    allowed, distance = allowed_ids(logit, temperature, top_k, top_p)
    z = (logit - best) / temperature - np.log(-np.log(philox_uniforms(seed, position, 1, logit.size)))
    within = np.where(allowed, z, -np.inf)
    y = int(np.argmax(within))
    runner_up = np.partition(within, -2)[-2]
    margin = min(margin, float(distance[z >= z[y]].min()))
    return y, min(margin, float(z[y] - runner_up) if np.isfinite(runner_up) else float("inf"))
