"""Generate with a transformers model whose decode steps a monobuild package runs.

The model prefills the prompts (its own forward over the left-padded batch, as ``generate``
does), its cache is copied into the package's paged KV cache, and every further token comes from
the package's decode step, replayed in a CUDA graph together with the step's bookkeeping (the next inputs, the rows
that ended, the output buffer), so the host waits for the device only every ``sync_every`` tokens,
to stream them and to see whether every row has ended::

    from monobuild.integrations.transformers import Decoder
    decoder = Decoder(model, "build/llama-3.2-1b-sm_90/sm_90")
    new_ids = decoder.generate(prompts, max_new_tokens=256, eos_token_id=tokenizer.eos_token_id)
    for chunk in decoder.stream(prompts, max_new_tokens=256):   # per row, the ids since the last chunk
        ...

Greedy decoding (the package's head ``ids``, or temperature 0): a row's new ids are
``model.generate(..., do_sample=False)``'s wherever the model's top-2 margin decides them (the GPU
test states the margin). With a sampling head, ``temperature``, ``top_k``, ``top_p`` and ``seed``
draw each id in the graph. A row ends after its first end-of-sequence id, and ids after it are not
returned. torch and transformers only, and no Triton: the model's config is compared with the
package's geometry by the compiler's config reader, which is plain Python (``runtime/gate.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from .. import runtime
from ..runtime.gate import Declined, geometry_difference, step_refusal
from ..runtime.kvcache import write_positions


class Decoder:
    """A transformers causal LM with a package bound to its weights: ``generate`` and ``stream``.

    ``package`` is a package directory or a loaded ``runtime.Package``; it must be compiled for
    the model's geometry (``Declined`` says which fields differ otherwise) with a greedy or a
    sampling head.
    The model's weights are bound once (packed into the programs' layout on its device).
    """

    def __init__(self, model, package: str | Path | runtime.Package, *, mode: str | None = None):
        pkg = package if isinstance(package, runtime.Package) else runtime.load(package, model.device)
        why = geometry_difference(pkg.geometry, model.config.to_dict(), "the model's config")
        if why:
            raise Declined(f"{pkg.path}: {why}")
        if pkg.manifest.deployment.head == "logits":
            raise Declined(f"{pkg.path}: its head writes logits; generate needs a package compiled with head: ids "
                           "or sample")
        self.model, self.package, self.mode = model, pkg, mode or pkg.modes[0]
        self.weights = pkg.bind_weights(model.state_dict())
        self._bands = tuple(s.band for s in pkg.manifest.steps if s.mode == self.mode)
        self._kv: runtime.KVCache | None = None
        self._step: runtime.DecodeStep | None = None

    @property
    def kv_cache(self) -> runtime.KVCache | None:
        """The paged KV cache the decode steps run over (None before the first generation)."""
        return self._kv

    def step_for(self, num_blocks: int) -> runtime.DecodeStep:
        """The decode step over a KV cache of at least ``num_blocks`` blocks (grown when too small)."""
        if self._kv is None or self._kv.num_blocks < num_blocks:
            self._step = self._kv = None
            torch.cuda.empty_cache()
            self._kv = self.package.allocate_kv_cache(num_blocks)
            self._step = self.package.bind(self.weights, self._kv, self.mode)
        return self._step

    def generate(self, prompts, max_new_tokens: int, eos_token_id: int | Sequence[int] | None = None,
                 sync_every: int = 16, **sampling) -> list[list[int]]:
        """Each row's new ids (at most ``max_new_tokens``, through its first end-of-sequence id)."""
        out: list[list[int]] = [[] for _ in range(len(prompts))]
        for chunk in self.stream(prompts, max_new_tokens, eos_token_id, sync_every, **sampling):
            for row, ids in zip(out, chunk):
                row.extend(ids)
        return out

    def stream(self, prompts, max_new_tokens: int, eos_token_id: int | Sequence[int] | None = None,
               sync_every: int = 16, *, temperature=0.0, top_k=0, top_p=1.0, seed=0) -> Iterator[list[list[int]]]:
        """The new ids as they come: the prefill's at once, then every ``sync_every`` tokens, each
        row's ids since the last chunk. ``temperature``, ``top_k``, ``top_p`` and ``seed`` (a value
        for every row or one a row) sample with a package whose head samples (docs/runtime.md);
        temperature 0 is greedy."""
        prompts = _prompts(prompts, self.package.device)
        settings = sampling_for(len(prompts), self.package.device, temperature, top_k, top_p, seed)
        if self.package.manifest.deployment.head != "sample":
            if bool((settings.temperature > 0).any()):
                raise ValueError(f"temperature: {self.package.path} has a greedy head; sampling needs a package "
                                 "compiled with head: sample")
            settings = None
        rows, longest = len(prompts), max(p.numel() for p in prompts) + max_new_tokens - 1  # the last step's context
        why = step_refusal(self._bands, self.package.manifest.deployment.max_context, rows, 1, longest)
        if why:
            raise ValueError(f"{rows} prompts and {max_new_tokens} new tokens: {why}")
        step = self.step_for(rows * -(-longest // self.package.block_size))
        yield from decode(self.model, step, self._kv, prompts, max_new_tokens, eos_token_id, sync_every,
                          sampling=settings)


def sampling_for(rows: int, device, temperature=0.0, top_k=0, top_p=1.0, seed=0) -> runtime.Sampling:
    """Per-row sampling settings on ``device`` from a value for every row or one a row."""
    def per_row(value, dtype):
        t = torch.as_tensor(value, dtype=dtype).flatten().to(device)
        if t.numel() not in (1, rows):
            raise ValueError(f"sampling: {t.numel()} values for {rows} rows")
        return t.expand(rows).contiguous()

    return runtime.Sampling(per_row(temperature, torch.float32), per_row(top_k, torch.int32),
                            per_row(top_p, torch.float32), per_row(seed, torch.int64))


def decode(model, step, kv: runtime.KVCache, prompts: list[torch.Tensor], max_new_tokens: int,
           eos_token_id: int | Sequence[int] | None = None, sync_every: int = 16,
           graph: bool = True, sampling: runtime.Sampling | None = None) -> Iterator[list[list[int]]]:
    """Generation with ``model`` prefilling and ``step`` (a decode step's signature, ids out)
    decoding over ``kv``, whose first blocks the rows take in turn (the cache must hold each row's
    prompt and new tokens): chunks of each row's new ids, the decode steps replayed in one CUDA
    graph where ``graph``. With ``sampling`` (a sampling head's settings) the step draws each id;
    the prefill's first id is drawn here by the same rule, with torch's generator seeded by the
    row's seed (its own uniforms, the same distribution)."""
    if max_new_tokens < 1 or sync_every < 1:
        raise ValueError("max_new_tokens and sync_every must be at least 1")
    device = prompts[0].device
    rows, block_size = len(prompts), kv.k[0].shape[1]
    lengths = [p.numel() for p in prompts]
    pages = -(-(max(lengths) + max_new_tokens - 1) // block_size)
    if rows * pages > kv.num_blocks:
        raise ValueError(f"kv: {kv.num_blocks} blocks; {rows} rows of up to {pages} pages need {rows * pages}")
    tables = torch.arange(rows * pages, dtype=torch.int32, device=device).view(rows, pages)
    eos = torch.tensor(_ids(eos_token_id), dtype=torch.int32, device=device)
    with torch.no_grad():
        first = _first_ids(_prefill(model, kv, prompts, tables), sampling).to(torch.int32)
        state = _DecodeState(first, torch.tensor(lengths, dtype=torch.int32, device=device), tables, eos,
                             max_new_tokens, sampling)
        yield from _emit(state, _replays(step, state, max_new_tokens - 1, graph), sync_every, set(eos.tolist()))


def _prompts(prompts, device) -> list[torch.Tensor]:
    out = [torch.as_tensor(p, dtype=torch.long, device=device).flatten() for p in prompts]
    if not out or min(p.numel() for p in out) == 0:
        raise ValueError("prompts: every row needs at least one token")
    return out


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one batch, each row's ids at its end, as ``generate`` takes them: (ids, attention mask)."""
    width = max(p.numel() for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=prompts[0].device)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - p.numel():], mask[b, width - p.numel():] = p, 1
    return ids, mask


def _prefill(model, kv: runtime.KVCache, prompts: list[torch.Tensor], tables: torch.Tensor) -> torch.Tensor:
    """Run the model over the prompts as one left-padded batch (as ``generate`` does), copy each
    row's cache into its pages; the rows' last logits."""
    lengths = [p.numel() for p in prompts]
    ids, mask = left_padded(prompts)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    for layer, cached in enumerate(out.past_key_values.layers):
        kept = cached.keys.shape[2]  # the padded batch's last positions (all, or a sliding window's)
        for b, length in enumerate(lengths):
            n = min(length, kept)
            write_positions(kv, layer, cached.keys[b, :, kept - n:], cached.values[b, :, kept - n:], tables[b],
                            length - n)
    return out.logits[:, -1].float()


def _first_ids(logits: torch.Tensor, sampling: runtime.Sampling | None) -> torch.Tensor:
    """The prefill's ids: greedy, or drawn from softmax(logits / temperature) within each row's
    top-k and top-p (measured on the whole distribution, as the sampling head does)."""
    ids = logits.argmax(-1)
    if sampling is None:
        return ids
    for b, (t, k, p, seed) in enumerate(zip(*(getattr(sampling, n).tolist() for n in runtime.Sampling.DTYPES))):
        if t <= 0 or p <= 0:
            continue
        probs = torch.softmax(logits[b].double() / t, -1)
        order = probs.argsort(descending=True)
        keep = torch.cumsum(probs[order], 0) - probs[order] < p  # the mass of the ids more likely than each
        if k > 0:
            keep[k:] = False
        allowed = order[keep]
        draw = torch.Generator(device=logits.device).manual_seed(seed & (2**63 - 1))
        ids[b] = allowed[torch.multinomial(probs[allowed], 1, generator=draw)]
    return ids


def _ids(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(i) for i in eos_token_id]


class _DecodeState:
    """The decode loop's device state, advanced by each step inside the CUDA graph."""

    def __init__(self, first: torch.Tensor, lengths: torch.Tensor, tables: torch.Tensor, eos: torch.Tensor,
                 max_new_tokens: int, sampling: runtime.Sampling | None = None):
        self.tables, self.eos, self.sampling = tables, eos, sampling
        self.ids = first.clone()  # the next step's input id per row
        self.positions = lengths.clone()  # its position (the prompt's length, then one more per step)
        self.alive = ~torch.isin(first, eos)
        self.out = torch.full((max_new_tokens, first.numel()), -1, dtype=torch.int32, device=first.device)
        self.out[0] = first
        self.t = torch.ones(1, dtype=torch.long, device=first.device)  # the next row of ``out``

    def advance(self, step) -> None:
        """One decode step: ended rows run as padding (context 0: they store nothing)."""
        live = self.alive.to(torch.int32)
        inputs = (self.ids, self.positions * live, self.tables, (self.positions + 1) * live)
        ids = step(*inputs, sampling=self.sampling) if self.sampling is not None else step(*inputs)
        ids = torch.where(self.alive, ids, torch.full_like(ids, -1))
        self.out.index_copy_(0, self.t, ids[None])
        self.alive &= ~torch.isin(ids, self.eos)
        self.ids.copy_(torch.where(self.alive, ids, torch.zeros_like(ids)))
        self.positions += 1
        self.t += 1


def _replays(step, state: _DecodeState, steps: int, graph: bool) -> Iterator[int]:
    """Run ``steps`` decode steps (with ``graph``, the first eagerly and the rest as replays of its
    CUDA graph), yielding after each how many have been issued; nothing here waits for the device."""
    if steps == 0:
        return
    state.advance(step)  # eager, as a warm-up: an operation's first call may set up what a capture cannot
    yield 1
    if steps == 1:
        return
    if not graph:
        for issued in range(2, steps + 1):
            state.advance(step)
            yield issued
        return
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        state.advance(step)
    for issued in range(2, steps + 1):
        graph.replay()
        yield issued


def _emit(state: _DecodeState, issued: Iterator[int], sync_every: int, eos: set[int]) -> Iterator[list[list[int]]]:
    """Each row's new ids in chunks: the prefill's id at once, then every ``sync_every`` steps (the
    only reads of the device), until every row has ended or the steps run out."""
    done = [False] * state.out.shape[1]
    sent = 0

    def chunk(upto: int) -> list[list[int]]:
        nonlocal sent
        block, sent = state.out[sent:upto].T.tolist(), upto  # waits for the steps issued so far
        return [_until_end(ids, eos, done, b) for b, ids in enumerate(block)]

    yield chunk(1)
    for n in issued:  # n steps issued: out[: n + 1] is being written
        if all(done):
            return
        if n + 1 - sent >= sync_every or n + 1 == state.out.shape[0]:
            yield chunk(n + 1)


def _until_end(ids: list[int], eos: set[int], done: list[bool], row: int) -> list[int]:
    """A row's ids through its first end-of-sequence id (``done[row]`` once it came)."""
    kept = []
    for i in ids:
        if done[row] or i < 0:
            break
        kept.append(i)
        done[row] = i in eos
    return kept
