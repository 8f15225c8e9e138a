"""The streaming executor's sync edges and launch dependencies, in Gluon.

Same protocol as the Triton executor's (``kernels/sync.py``): a signal is the compute warps'
CTA barrier, then one release add at gpu scope; a wait polls the counter with acquire loads until
it reaches the step's target. The difference is where the poll runs: every compute thread polls
with its own ``ld.acquire.gpu`` (inline PTX), so there is no shared-memory broadcast and no
barrier per poll, and each thread's later loads are ordered after its own acquire.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _acquire(counter_ptr):
    return gl.inline_asm_elementwise("ld.acquire.gpu.global.b64 $0, [$1];", "=l,l", [counter_ptr], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def wait(counter_ptr, target, hang_log, WAIT_SPINS: gl.constexpr, HANG_SLOTS: gl.constexpr):
    """Spin until the counter reaches ``target``. Debug builds (WAIT_SPINS > 0) give up after
    WAIT_SPINS polls and append (CTA, counter address, target, last value) to ``hang_log``, as the
    Triton executor's waits do, so a broken program ends and the runtime reports it; their polls
    are one thread's acquire broadcast to the partition, so every thread takes the same decision."""
    if WAIT_SPINS == 0:
        seen = _acquire(counter_ptr)
        while seen < target:
            seen = _acquire(counter_ptr)
    else:
        seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        spins = 0
        while (seen < target) & (spins < WAIT_SPINS):
            seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
            spins += 1
        if seen < target:
            slot = gl.atomic_add(hang_log, 1, sem="relaxed", scope="gpu")
            if slot < HANG_SLOTS:
                record = hang_log + 1 + slot * 4
                gl.store(record, gl.program_id(0).to(gl.int64))
                gl.store(record + 1, counter_ptr.to(gl.int64, bitcast=True))
                gl.store(record + 2, target)
                gl.store(record + 3, seen)


@gluon.jit
def signal(counter_ptr):
    """The compute warps' stores, a barrier among them, then one release add at gpu scope."""
    gl.thread_barrier()
    gl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@gluon.jit
def step_target(counter_ptr, G: gl.constexpr):
    """This step's wait target, (epoch + 1) · G, from the first edge's counter read before this
    CTA's first signal of the step (``kernels/sync.py``'s ``step_epoch`` says why it is exact)."""
    seen = gl.atomic_add(counter_ptr, 0, sem="relaxed", scope="gpu")
    return (seen // G + 1) * G


@gluon.jit
def grid_dependency_wait():
    """griddepcontrol.wait: what the previous launch wrote is visible after it."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def launch_dependents():
    """griddepcontrol.launch_dependents: the next launch may start."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _timer():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def clock_start(clock_ptr, slot: gl.constexpr, CLOCK_SLOTS: gl.constexpr):
    """Profiling builds: a stage starts (its wait has returned): the global timer (ns) into
    ``slot`` of this CTA's ``stage_clock`` row, the SM it runs on into slot 0 (as the Triton
    executor's ``clock_start``)."""
    row = clock_ptr + gl.program_id(0) * CLOCK_SLOTS
    sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    gl.store(row, sm.to(gl.int64))
    gl.store(row + slot, _timer())


@gluon.jit
def clock_end(clock_ptr, slot: gl.constexpr, CLOCK_SLOTS: gl.constexpr):
    """Profiling builds: a stage's work is done (before its signal): the timer into ``slot``."""
    gl.store(clock_ptr + gl.program_id(0) * CLOCK_SLOTS + slot, _timer())
