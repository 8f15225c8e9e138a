"""One rank a process (tensor parallelism): the buffers a rank's peers touch, mapped into every
rank's process once, at bind.

A split package's programs signal into every rank's cross-rank counters (``tp_counters``) and
read the peers' partials, tile parts or logits rows (the scratch regions its ``peer`` arguments
name). ``Package.bind(..., group=)`` allocates the rank's step buffers, then every rank exports a
CUDA IPC handle of each of those buffers (torch's own: ``torch.multiprocessing.reductions``), the
ranks exchange them through the process group (``all_gather_object``: any backend, NCCL or
gloo), and each rank opens its peers'. Nothing is exchanged per step, and the engine's own
process group is all it takes. IPC needs the ranks' devices in one host (peer access between
them, which opening a handle enables); NVLink multicast is not used.

On AMD the same exchange needs the counters and partials allocated fine-grained (HIP's default
memory is coherent across devices only at kernel boundaries, and a peer reads the signals while
its kernel runs); that allocation is not built, so ``bind`` refuses a split package on ROCm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ..manifest import Manifest, PackageError
from .buffers import StepBuffers


@dataclass(frozen=True)
class PeerBuffers:
    """What a rank's programs take of one peer (``RankBinding.peers``): its cross-rank counters and
    the scratch regions they read, opened in this process (a rank's own are its ``StepBuffers``)."""

    tp_counters: torch.Tensor
    scratch: Mapping[str, torch.Tensor]


def shared_regions(manifest: Manifest) -> tuple[str, ...]:
    """The scratch regions a split package's programs read in their peers (``<region>_peer<s>``)."""
    names = {a.name.rpartition("_peer")[0] for p in manifest.programs for a in p.args if a.role == "peer"}
    return tuple(sorted(names - {"tp_counters"}))


def exchange(bands: Sequence[StepBuffers], regions: Sequence[str], group) -> list[list[StepBuffers | PeerBuffers]]:
    """Every rank's buffers of each band, by rank, as this rank's programs reach them: its own
    ``StepBuffers`` at its index, the peers' opened from their IPC handles. Collective: every rank
    of ``group`` calls it with the same package's bands."""
    import torch.distributed as dist
    from torch.multiprocessing.reductions import reduce_tensor

    torch.cuda.synchronize()  # this rank's counters are zero before any peer can signal them
    mine = [{name: reduce_tensor(t) for name, t in (("tp_counters", b.tp_counters),
                                                    *((n, b.scratch[n]) for n in regions if n in b.scratch))}
            for b in bands]
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    rank = dist.get_rank(group)
    out = []
    for k, own in enumerate(bands):
        ranks: list[StepBuffers | PeerBuffers] = []
        for s, theirs in enumerate(everyone):
            if s == rank:
                ranks.append(own)
                continue
            opened = {name: rebuild(*args) for name, (rebuild, args) in theirs[k].items()}
            ranks.append(PeerBuffers(opened.pop("tp_counters"), opened))
        out.append(ranks)
    dist.barrier(group)  # every rank holds every peer's buffers before any rank's first step
    return out


def agree(refusal: str | None, group) -> None:
    """Every rank of ``group`` learns every rank's refusal to bind (None: ready) before any rank
    maps a peer's memory: all go on, or all raise the same ``PackageError`` naming the ranks that
    refused and why (a rank that raised alone would leave its peers waiting in the exchange)."""
    import torch.distributed as dist

    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, refusal, group=group)
    refused = [f"rank {s}: {why}" for s, why in enumerate(everyone) if why is not None]
    if refused:
        raise PackageError("binding the ranks was refused: " + "; ".join(refused))
