"""Hang diagnostics on a GPU: a debug build reports a broken sync instead of hanging.

Loads a debug package (``monobuild compile RECIPE --debug-wait-spins N``), runs a correct step,
then breaks the program's state the way a lost signal would: layer 0's counter for the
attn→combine edge is set 5 signals short, so that wait can never complete. The step must raise
``WaitTimeout`` naming the program, layer, CTAs, counter and epoch, within a bounded time; after
the runtime's reset, the next step must run clean again. Usage::

    python tools/hang_check.py DEBUG_PACKAGE
"""

from __future__ import annotations

import sys
import time

import torch

from monobuild import runtime
from monobuild.bench.cases import random_case, random_kv_cache, random_state_dict


def main() -> int:
    pkg = runtime.load(sys.argv[1])
    step = pkg.bind(random_state_dict(pkg, 0), random_kv_cache(pkg, 64, 0), "persistent")
    i = random_case(pkg, [300], 1, 64, 0).inputs
    args = (i.tokens, i.positions, i.block_tables, i.context_lens)
    t0 = time.perf_counter()
    step(*args)
    torch.cuda.synchronize()
    print(f"clean step: {1e3 * (time.perf_counter() - t0):.1f} ms, no timeout")
    band = step.band_for(1, 1)
    layer0 = next(k for k, launch in enumerate(band.spec.launches) if launch.layer == 0)
    program = pkg.manifest.program(band.spec.launches[layer0].program)
    edge = next(e.counter for e in program.syncs if (e.producer, e.consumer) == ("attn", "combine"))
    band.buffers.counters[layer0, edge] -= 5  # five signals of attn → combine lost
    t0 = time.perf_counter()
    try:
        step(*args)
    except runtime.WaitTimeout as e:
        print(f"broken step raised WaitTimeout after {1e3 * (time.perf_counter() - t0):.1f} ms:")
        print(e)
    else:
        print("FAIL: the broken step did not report")
        return 1
    t0 = time.perf_counter()
    step(*args)
    torch.cuda.synchronize()
    print(f"after the reset: {1e3 * (time.perf_counter() - t0):.1f} ms, no timeout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
