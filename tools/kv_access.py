"""How fast one CTA per SM can stream a paged KV cache, by the order it reads it in.

    python tools/kv_access.py [--gib 1] [--stages 3 5] [--tokens 256] [--walk-tiles 4]

A micro-benchmark behind the attention stage's design (docs/PERFORMANCE.md), run on the GPU
with Triton. The cache has the serving engines' layout, [blocks, 16 tokens, KV heads, head dim]
in bf16: one 16-token page of one layer is 16 KB, and within it a KV head's row of one token is
128 bytes, KV heads × 128 bytes apart. Every mode streams the same bytes, in tiles of T tokens ×
128 bytes (32 KB at the default T = 256), one CTA per SM, into a product (``tl.dot`` of ones and
the tile) as attention's K and V go into its products, so that Triton's software pipeline
streams them through shared memory (``cp.async``) as it does those:

- ``contiguous``: 32 KB tiles of consecutive bytes (what the floor streams);
- ``head``: a CTA walks one KV head's rows of a run of tokens, pages through a block table (the
  attention stage's walk: 128-byte rows, KV heads × 128 bytes apart);
- ``page``: a CTA walks whole pages, every KV head of its tokens (16 KB contiguous a page),
  pages through a block table.

Block tables are a random permutation of the pages (``random``) or the identity (``ordered``).
The device-to-device copy bandwidth (read + write), the roofline's denominator, is printed
beside them.

A second table times short walks: every CTA streams only ``--walk-tiles`` tiles, as a split of the
attention stage does at small contexts (Llama-3.2-1B at 8 rows and context 1024: 128 KB a CTA,
four 256-token head tiles' worth). One such walk is a few microseconds, under a launch's own
cost, so the walks are launched back to back in a CUDA graph, each over its own part of the
cache (none finds its bytes in L2), and an empty launch's time is taken off each. What is left
is a walk from its first load to its last byte, with nothing else to do: a floor for an
attention stage that starts its walk when the stage starts.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

BS, NKV, D = 16, 8, 64  # tokens a page, KV heads, head dim (Llama-3.2-1B)
TILE = 16384  # bf16 elements a tile: 32 KB


@triton.jit
def _stream(cache, table, sink, n_tiles, MODE: tl.constexpr, T: tl.constexpr, STAGES: tl.constexpr,
            BS: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr):
    """CTA pid streams tiles [pid·n_tiles, (pid + 1)·n_tiles) of its walk and stores a checksum."""
    pid = tl.program_id(0)
    if MODE == 0:  # contiguous: T rows of NKV·D elements
        rows = tl.arange(0, T // NKV)
        cols = tl.arange(0, NKV * D)
        ones = tl.full([16, T // NKV], 1.0, tl.float32).to(cache.dtype.element_ty)
        acc = tl.zeros([16, NKV * D], tl.float32)
        for i in tl.range(0, n_tiles, num_stages=STAGES):
            tile = (pid * n_tiles + i).to(tl.int64)
            x = tl.load(cache + tile * (T * D) + rows[:, None] * (NKV * D) + cols[None, :])
            acc = tl.dot(ones, x, acc)
        tl.store(sink + pid * NKV * D + cols, tl.sum(acc, axis=0))
    elif MODE == 1:  # head: T tokens of KV head h, pages from the table
        h = pid % NKV
        t = tl.arange(0, T)
        d = tl.arange(0, D)
        ones = tl.full([16, T], 1.0, tl.float32).to(cache.dtype.element_ty)
        acc = tl.zeros([16, D], tl.float32)
        for i in tl.range(0, n_tiles, num_stages=STAGES):
            page = ((pid // NKV) * n_tiles + i) * (T // BS) + t // BS
            block = tl.load(table + page).to(tl.int64)
            x = tl.load(cache + ((block * BS + t % BS) * NKV + h)[:, None] * D + d[None, :])
            acc = tl.dot(ones, x, acc)
        tl.store(sink + pid * NKV * D + d, tl.sum(acc, axis=0))
    else:  # page: T // NKV tokens, every KV head, pages from the table
        r = tl.arange(0, T // NKV)
        c = tl.arange(0, NKV * D)
        ones = tl.full([16, T // NKV], 1.0, tl.float32).to(cache.dtype.element_ty)
        acc = tl.zeros([16, NKV * D], tl.float32)
        for i in tl.range(0, n_tiles, num_stages=STAGES):
            page = (pid * n_tiles + i) * (T // NKV // BS) + r // BS
            block = tl.load(table + page).to(tl.int64)
            x = tl.load(cache + ((block * BS + r % BS) * NKV * D)[:, None] + c[None, :])
            acc = tl.dot(ones, x, acc)
        tl.store(sink + pid * NKV * D + c, tl.sum(acc, axis=0))


def _time(fn, reps: int = 20) -> float:
    """Median milliseconds of fn over reps, after a warm-up."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


MODES = ("contiguous", "head", "page")


def stream(mode: str, cache: torch.Tensor, table: torch.Tensor, sink: torch.Tensor, grid: int, n_tiles: int,
           tokens: int, stages: int) -> None:
    """One walk (``MODES``) over the whole cache: ``grid`` CTAs of ``n_tiles`` tiles of ``tokens``
    KV-head rows each; each CTA's checksum goes to its row of ``sink``."""
    _stream[(grid,)](cache, table, sink, n_tiles, MODE=MODES.index(mode), T=tokens, STAGES=stages, BS=BS, NKV=NKV,
                     D=D, num_warps=4)


@triton.jit
def _empty(sink):
    """The launch cost the short walks are measured against."""
    pass


def short_walk_us(cache: torch.Tensor, table: torch.Tensor, sink: torch.Tensor, grid: int, walk_tiles: int,
                  tokens: int, stages: int) -> float:
    """Microseconds one head walk of ``walk_tiles`` tiles a CTA takes, launch cost taken off: as many
    walks as the cache holds, each over its own tiles, replayed back to back in one CUDA graph,
    against the same number of empty launches."""
    per_walk = grid * walk_tiles * tokens // BS // NKV  # pages one walk reads
    walks = table.numel() // per_walk

    def walks_fn():
        for w in range(walks):
            stream("head", cache, table[w * per_walk:(w + 1) * per_walk], sink, grid, walk_tiles, tokens, stages)

    def empties_fn():
        for _ in range(walks):
            _empty[(grid,)](sink, num_warps=4)

    times = []
    for fn in (walks_fn, empties_fn):
        fn()  # compile, and warm up, outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        times.append(_time(graph.replay))
    return (times[0] - times[1]) * 1e3 / walks


def checksum_matches(cache: torch.Tensor, sink: torch.Tensor) -> bool:
    """Whether a walk read every element of the cache exactly once: each product adds a tile into
    16 rows, so the checksums add up to 16 × the cache's sum (exact for small integers)."""
    return sink.double().sum().item() == 16 * cache.double().sum().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="cache bytes streamed a run")
    ap.add_argument("--stages", type=int, nargs="+", default=[3, 5], help="pipeline depths")
    ap.add_argument("--tokens", type=int, default=256, help="tokens a tile in the head mode (T), a multiple of 128")
    ap.add_argument("--walk-tiles", type=int, default=4, help="tiles a CTA streams in the short walks (0: none)")
    args = ap.parse_args()
    if args.tokens % (BS * NKV) or args.tokens & (args.tokens - 1):
        ap.error(f"--tokens: a power of two and a multiple of {BS * NKV} (a page of every KV head), got {args.tokens}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms // NKV * NKV  # whole groups of KV heads, as the attention stage's tasks
    tile_bytes = args.tokens * D * 2
    n_tiles = int(args.gib * 2**30) // (grid * tile_bytes)
    pages = grid * n_tiles * args.tokens // BS // NKV
    # Small positive integers: the checksums are exact, and one tile missed or read twice changes them.
    cache = torch.randint(1, 3, (pages * BS * NKV * D,), device="cuda").to(torch.bfloat16)
    sink = torch.zeros(grid * NKV * D, dtype=torch.float32, device="cuda")
    nbytes = cache.numel() * 2
    tables = {"ordered": torch.arange(pages, dtype=torch.int32, device="cuda"),
              "random": torch.randperm(pages, device="cuda").to(torch.int32)}
    dst = torch.empty_like(cache)
    copy_ms = _time(lambda: dst.copy_(cache))
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs, grid {grid}, {nbytes / 2**30:.2f} GiB streamed, "
          f"{args.tokens}-token head tiles ({tile_bytes // 1024} KB)")
    print(f"device-to-device copy (read + write): {2 * nbytes / copy_ms / 1e6:.0f} GB/s")
    print(f"{'mode':<12}{'table':<9}{'stages':>6}{'ms':>9}{'GB/s':>8}{'of copy':>9}")
    for mode in MODES:
        for table_name, table in tables.items():
            if mode == "contiguous" and table_name == "random":
                continue
            for stages in args.stages:
                def run(mode=mode, table=table, stages=stages):
                    stream(mode, cache, table, sink, grid, n_tiles, args.tokens, stages)
                sink.zero_()
                run()
                if not checksum_matches(cache, sink):
                    raise SystemExit(f"kv_access: the {mode} walk ({table_name} table, {stages} deep) did not read "
                                     f"the cache exactly once")
                ms = _time(run)
                gbs = nbytes / ms / 1e6
                print(f"{mode:<12}{table_name if mode != 'contiguous' else '—':<9}{stages:>6}{ms:>9.3f}{gbs:>8.0f}"
                      f"{gbs / (2 * nbytes / copy_ms / 1e6):>9.1%}")
    if args.walk_tiles:
        walk_bytes = grid * args.walk_tiles * tile_bytes
        print(f"short head walks: {args.walk_tiles} tiles ({args.walk_tiles * tile_bytes // 1024} KB) a CTA, "
              f"{walk_bytes / 2**20:.0f} MiB a walk, launch cost taken off; at the copy bandwidth "
              f"{walk_bytes / (2 * nbytes / copy_ms) * 1e3:.2f} µs")
        print(f"{'table':<9}{'stages':>6}{'µs':>9}{'GB/s':>8}{'of copy':>9}")
        for table_name, table in tables.items():
            for stages in args.stages:
                us = short_walk_us(cache, table, sink, grid, args.walk_tiles, args.tokens, stages)
                gbs = walk_bytes / us / 1e3
                print(f"{table_name:<9}{stages:>6}{us:>9.2f}{gbs:>8.0f}{gbs / (2 * nbytes / copy_ms / 1e6):>9.1%}")


if __name__ == "__main__":
    main()
