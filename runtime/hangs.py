"""Wait timeouts of a debug build (recipe ``debug_wait_spins`` > 0), decoded for a person.

A debug build's waits give up after a bounded number of polls and append a record to the step's
``hang_log``: [count, then per record (CTA, counter address, target, last value seen)]. After the
step, ``check_hang_log`` maps each counter address back to its launch (program, layer) and sync
edge, raises ``WaitTimeout`` with one line per record, and resets the log and the counters (all
zero is a consistent state: every launch's epoch is read from its own counters), so the caller
can keep stepping. Under tensor parallelism a record may name a cross-rank counter: the site and
the rank whose signals did not come (``RanksStep`` reads every rank's log, and resets every
rank's counters, cross-rank ones included: a wait's target is its own rank's count, so all zero
is consistent there too). Debug builds synchronise with the host after each step to read the log.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..manifest import Manifest
from ..parallel import SLOTS
from ..schema import Step


@dataclass(frozen=True)
class WaitRecord:
    program: str
    layer: int | None
    cta: int
    counter: int  # index in the launch's counter block = the sync edge; cross-rank: site × slots + source rank
    edge: str  # "attn→combine"; cross-rank: "o→reduce_o, rank 1's signals"
    target: int
    seen: int
    rank: int | None = None  # the waiting rank, under tensor parallelism

    def line(self) -> str:
        where = (f"rank {self.rank}: " if self.rank is not None else "") + self.program
        where += f" (layer {self.layer})" if self.layer is not None else ""
        return (f"{where}: CTA {self.cta} gave up waiting on counter {self.counter} ({self.edge}) for {self.target}, "
                f"last saw {self.seen} ({self.target - self.seen} signals missing)")


class WaitTimeout(RuntimeError):
    """A debug build's wait gave up; ``records`` say which CTA waited on which counter at which epoch."""

    def __init__(self, records: list[WaitRecord], dropped: int):
        self.records = records
        more = f"\n… and {dropped} more (the log keeps {len(records)})" if dropped else ""
        super().__init__(f"{len(records) + dropped} wait(s) timed out:\n" + "\n".join(r.line() for r in records) + more)


def hang_records(hang_log: torch.Tensor, counters: torch.Tensor, manifest: Manifest, spec: Step,
                 tp_counters: torch.Tensor | None = None, rank: int | None = None) -> tuple[list[WaitRecord], int]:
    """The log's records, decoded (synchronises: debug builds only), and how many it dropped. An
    address in ``counters`` (a row per launch) is a sync edge of that launch; one in
    ``tp_counters`` ([sites, slots]) is a cross-rank site and the rank whose signals did not come."""
    log = hang_log.cpu()
    count = int(log[0])
    slots = (log.numel() - 1) // 4
    base, width = counters.data_ptr(), counters.stride(0) * counters.element_size()
    records = []
    for k in range(min(count, slots)):
        cta, address, target, seen = (int(v) for v in log[1 + 4 * k: 5 + 4 * k])
        if tp_counters is not None and 0 <= address - tp_counters.data_ptr() < tp_counters.numel() * 8:
            records.append(_cross_rank_record(manifest, spec, (address - tp_counters.data_ptr()) // 8, cta, target,
                                              seen, rank))
            continue
        launch, counter = divmod(address - base, width)
        counter //= counters.element_size()
        entry = spec.launches[launch]
        program = manifest.program(entry.program)
        edge = next((f"{s.producer}→{s.consumer}" for s in program.syncs if s.counter == counter), "?")
        records.append(WaitRecord(entry.program, entry.layer, cta, counter, edge, target, seen, rank))
    return records, count - len(records)


def _cross_rank_record(manifest: Manifest, spec: Step, counter: int, cta: int, target: int, seen: int,
                       rank: int | None) -> WaitRecord:
    """A cross-rank wait's record: the site's all-reduce program in this step (its layer is not in
    the record: every layer's instance waits on the same counter) and the silent source rank."""
    site, source = divmod(counter, SLOTS)
    ops = {c.kind: c.op for name in dict.fromkeys(x.program for x in spec.launches)
           for c in manifest.program(name).cross_rank if c.site == site}
    program = next((x.program for x in spec.launches
                    if any(c.site == site and c.kind == "wait" for c in manifest.program(x.program).cross_rank)), "?")
    edge = f"{ops.get('signal', '?')}→{ops.get('wait', '?')}, rank {source}'s signals"
    return WaitRecord(program, None, cta, counter, edge, target, seen, rank)


def check_hang_log(hang_log: torch.Tensor, counters: torch.Tensor, manifest: Manifest, spec: Step) -> None:
    records, dropped = hang_records(hang_log, counters, manifest, spec)
    if records or dropped:
        hang_log.zero_()
        counters.zero_()
        raise WaitTimeout(records, dropped)


def check_ranks_hang_logs(manifest: Manifest, ranks: list) -> None:
    """``check_hang_log`` over every rank of a split step (``ranks``: each rank's (Step, StepBuffers)
    in rank order): every rank's records in one ``WaitTimeout``, and every rank's log, counters and
    cross-rank counters reset together."""
    records, dropped = [], 0
    for rank, (spec, buffers) in enumerate(ranks):
        found, lost = hang_records(buffers.hang_log, buffers.counters, manifest, spec, buffers.tp_counters, rank)
        records += found
        dropped += lost
    if records or dropped:
        for _, buffers in ranks:
            buffers.hang_log.zero_()
            buffers.counters.zero_()
            buffers.tp_counters.zero_()
        raise WaitTimeout(records, dropped)


def check_group_hang_logs(manifest: Manifest, spec: Step, buffers, rank: int, group) -> None:
    """``check_hang_log`` for one rank a process (``bind(..., group=)``): every rank's records,
    gathered through the process group (collective: every rank's step calls it), raised on every
    rank alike, after every rank has reset its log and counters, cross-rank ones included."""
    import torch.distributed as dist

    found = hang_records(buffers.hang_log, buffers.counters, manifest, spec, buffers.tp_counters, rank)
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, found, group=group)
    records = [r for rank_records, _ in everyone for r in rank_records]
    dropped = sum(lost for _, lost in everyone)
    if records or dropped:
        buffers.hang_log.zero_()
        buffers.counters.zero_()
        buffers.tp_counters.zero_()
        torch.cuda.synchronize()
        dist.barrier(group)  # no rank steps again before every rank's counters are zero
        raise WaitTimeout(records, dropped)
