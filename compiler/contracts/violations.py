"""What a contract check reports: one violation per line, naming program, place, contract and why."""

from __future__ import annotations

from dataclasses import dataclass

CONTRACTS = {
    "P0": "planned", "I0": "integrity", "C1": "happens-before", "C2": "no overwrite in flight", "C3": "residency",
    "C4": "liveness", "C5": "epochs", "I1": "release signals", "I2": "acquire waits", "I3": "coherent loads",
    "I4": "declared sites", "I5": "edge counters", "S1": "read-only streams", "S2": "armed bytes",
    "S3": "the ring's handshake", "X1": "cross-rank signals", "X2": "cross-rank waits", "X3": "peer reads",
    "X4": "cross-rank sites",
}


@dataclass(frozen=True)
class Violation:
    program: str
    where: str  # "stage up", "region x1", "ptx line 869", "llir block %1116"
    contract: str  # a key of CONTRACTS
    why: str

    def line(self) -> str:
        return f"{self.program}: {self.where}: {self.contract} {CONTRACTS[self.contract]}: {self.why}"

    def to_json(self) -> dict:
        return {"program": self.program, "where": self.where, "contract": self.contract,
                "name": CONTRACTS[self.contract], "why": self.why}
