"""Wait timeouts of a debug build (recipe ``debug_wait_spins`` > 0), decoded for a person.

A debug build's waits give up after a bounded number of polls and append a record to the step's
``hang_log``: [count, then per record (CTA, counter address, target, last value seen)]. After the
step, ``check_hang_log`` maps each counter address back to its launch (program, layer) and sync
edge, raises ``WaitTimeout`` with one line per record, and resets the log and the counters (all
zero is a consistent state: every launch's epoch is read from its own counters), so the caller
can keep stepping. Debug builds synchronise with the host after each step to read the log.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..manifest import Manifest
from ..schema import Step


@dataclass(frozen=True)
class WaitRecord:
    program: str
    layer: int | None
    cta: int
    counter: int  # index in the launch's counter block = the sync edge
    edge: str  # "attn→combine"
    target: int
    seen: int

    def line(self) -> str:
        where = f"{self.program}" + (f" (layer {self.layer})" if self.layer is not None else "")
        return (f"{where}: CTA {self.cta} gave up waiting on counter {self.counter} ({self.edge}) for {self.target}, "
                f"last saw {self.seen} ({self.target - self.seen} signals missing)")


class WaitTimeout(RuntimeError):
    """A debug build's wait gave up; ``records`` say which CTA waited on which counter at which epoch."""

    def __init__(self, records: list[WaitRecord], dropped: int):
        self.records = records
        more = f"\n… and {dropped} more (the log keeps {len(records)})" if dropped else ""
        super().__init__(f"{len(records) + dropped} wait(s) timed out:\n" + "\n".join(r.line() for r in records) + more)


def check_hang_log(hang_log: torch.Tensor, counters: torch.Tensor, manifest: Manifest, spec: Step) -> None:
    log = hang_log.cpu()  # synchronises: debug builds only
    count = int(log[0])
    if count == 0:
        return
    slots = (log.numel() - 1) // 4
    base, width = counters.data_ptr(), counters.stride(0) * counters.element_size()  # a row per launch
    records = []
    for k in range(min(count, slots)):
        cta, address, target, seen = (int(v) for v in log[1 + 4 * k: 5 + 4 * k])
        launch, counter = divmod(address - base, width)
        counter //= counters.element_size()
        entry = spec.launches[launch]
        program = manifest.program(entry.program)
        edge = next((f"{s.producer}→{s.consumer}" for s in program.syncs if s.counter == counter), "?")
        records.append(WaitRecord(entry.program, entry.layer, cta, counter, edge, target, seen))
    hang_log.zero_()
    counters.zero_()
    raise WaitTimeout(records, count - len(records))
