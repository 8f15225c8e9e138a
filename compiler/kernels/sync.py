"""The driver's device side: sync edges (signal, wait, the step's epoch) and profiling clocks.

Only the program the driver writes (``driver.py``) calls these: an op's body is its math, and
the driver places every wait, signal and clock around it from the op list. The floor programs
(``floor.py``) use the same edges.
"""

import triton
import triton.language as tl


@triton.jit
def signal(counter_ptr):
    """Producer side of a sync edge: every thread's stores, a CTA barrier, then one release add.

    The barrier orders the CTA's stores before thread 0's atomic; the release at gpu/agent
    scope makes them visible to any CTA whose acquire reads the new count.
    """
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def wait(counter_ptr, target, hang_log, WAIT_SPINS: tl.constexpr, HANG_SLOTS: tl.constexpr):
    """Consumer side: spin on an acquire read of the counter until it reaches ``target``.

    ``atomic_add(ptr, 0, sem='acquire')`` folds into an acquire load (``ld.global.gpu.acquire``
    on sm_90, ``global_load … sc1; buffer_inv`` on gfx9); its result is broadcast to the CTA
    through shared memory with a barrier, so every thread's later loads are ordered after it.

    Debug builds (WAIT_SPINS > 0) give up after WAIT_SPINS polls and append a record to
    ``hang_log`` — [count, then (CTA, counter address, target, last value seen) per record] — so
    a broken program finishes and the runtime can report it instead of hanging the GPU.
    """
    poll(counter_ptr, target, "gpu", hang_log, WAIT_SPINS, HANG_SLOTS)


@triton.jit
def poll(counter_ptr, target, SCOPE: tl.constexpr, hang_log, WAIT_SPINS: tl.constexpr, HANG_SLOTS: tl.constexpr):
    """Acquire reads of the counter at ``SCOPE`` until it reaches ``target``; in a debug build
    (WAIT_SPINS > 0) at most WAIT_SPINS more, then a hang record if it still falls short."""
    seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope=SCOPE)
    if WAIT_SPINS == 0:
        while seen < target:
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope=SCOPE)
    else:
        spins = 0
        while (seen < target) & (spins < WAIT_SPINS):
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope=SCOPE)
            spins += 1
        if seen < target:
            log_hang(hang_log, counter_ptr, target, seen, HANG_SLOTS)


@triton.jit
def log_hang(hang_log, counter_ptr, target, seen, HANG_SLOTS: tl.constexpr):
    """A debug build's wait gave up: one record (CTA, counter address, target, last value seen)
    appended to ``hang_log`` while it has room (the count goes on, so the runtime says how many
    were dropped)."""
    slot = tl.atomic_add(hang_log, 1, sem="relaxed", scope="gpu")
    if slot < HANG_SLOTS:
        record = hang_log + 1 + slot * 4
        tl.store(record, tl.program_id(0).to(tl.int64))
        tl.store(record + 1, counter_ptr.to(tl.int64, bitcast=True))
        tl.store(record + 2, target)
        tl.store(record + 3, seen)


@triton.jit
def clock_start(clock_ptr, slot: tl.constexpr, CLOCK: tl.constexpr, CLOCK_SLOTS: tl.constexpr):
    """Profiling builds (CLOCK): a stage starts (its wait has returned). Writes the global timer
    (ns) into ``slot`` of this CTA's ``stage_clock`` row and the SM it runs on into slot 0, both
    after the wait, so nothing is stored before ``griddepcontrol.wait`` (contract C2)."""
    if CLOCK:
        row = clock_ptr + tl.program_id(0) * CLOCK_SLOTS
        tl.store(row, tl.extra.cuda.smid().to(tl.int64))
        tl.store(row + slot, tl.extra.cuda.globaltimer())


@triton.jit
def clock_end(clock_ptr, slot: tl.constexpr, CLOCK: tl.constexpr, CLOCK_SLOTS: tl.constexpr):
    """Profiling builds (CLOCK): a stage's work is done (before its signal); the timer into ``slot``.

    Stage k's start is slot 1 + 2k and its end 2 + 2k, so per CTA the wait before stage k is
    start_k − end_(k−1) and its work end_k − start_k.
    """
    if CLOCK:
        tl.store(clock_ptr + tl.program_id(0) * CLOCK_SLOTS + slot, tl.extra.cuda.globaltimer())


@triton.jit
def step_epoch(counter_ptr, G: tl.constexpr):
    """This step's epoch, read before this CTA's first signal of the step.

    Counters only grow: after step e every one of the G CTAs has signalled each edge once, so
    the first edge's counter lies in [e·G, (e+1)·G) until this CTA signals it. Targets are
    (e+1)·G; nothing is reset between steps and nothing comes from the host, so a CUDA graph
    replays the step unchanged.
    """
    seen = tl.atomic_add(counter_ptr, 0, sem="relaxed", scope="gpu")
    return seen // G


@triton.jit
def peer(s: tl.constexpr, p0, p1, p2, p3, p4, p5, p6, p7):
    """Rank ``s``'s copy of a buffer, of the eight a cross-rank op takes (those past the ranks are None)."""
    ptr = p0
    if s == 1:
        ptr = p1
    if s == 2:
        ptr = p2
    if s == 3:
        ptr = p3
    if s == 4:
        ptr = p4
    if s == 5:
        ptr = p5
    if s == 6:
        ptr = p6
    if s == 7:
        ptr = p7
    return ptr


@triton.jit
def peer_signal(tp_counters0, tp_counters1, tp_counters2, tp_counters3, tp_counters4, tp_counters5, tp_counters6,
                tp_counters7, rank, SITE: tl.constexpr, RANKS: tl.constexpr, SLOTS: tl.constexpr):
    """Producer side of a cross-rank site (tensor parallelism): the CTA's stores, a CTA barrier,
    then one release add at system scope into this rank's slot of the site in every rank's
    counters, so a rank whose acquire reads the count sees this CTA's part of the partial."""
    tl.debug_barrier()
    for s in tl.static_range(RANKS):
        counters = peer(s, tp_counters0, tp_counters1, tp_counters2, tp_counters3, tp_counters4, tp_counters5,
                        tp_counters6, tp_counters7)
        tl.atomic_add(counters + SITE * SLOTS + rank, 1, sem="release", scope="sys")


@triton.jit
def peer_wait(tp_counters, rank, SITE: tl.constexpr, RANKS: tl.constexpr, SLOTS: tl.constexpr, hang_log,
              WAIT_SPINS: tl.constexpr, HANG_SLOTS: tl.constexpr):
    """Consumer side: the count in this rank's own slot of the site is the target (this rank's
    producer launch has finished, so it holds every signal of the site's instances so far, and
    every rank signals each instance alike); then each rank's slot is polled with an acquire at
    system scope until it reaches the target.

    Debug builds (WAIT_SPINS > 0) give up on a rank's slot after WAIT_SPINS polls and log it as
    ``wait`` does (the address is in ``tp_counters``: the runtime reads the site and the silent
    rank from it), then go on to the next rank's."""
    target = tl.atomic_add(tp_counters + SITE * SLOTS + rank, 0, sem="acquire", scope="sys")
    for s in tl.static_range(RANKS):
        poll(tp_counters + SITE * SLOTS + s, target, "sys", hang_log, WAIT_SPINS, HANG_SLOTS)
