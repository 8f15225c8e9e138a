"""The sampling head's draw over a vocabulary of many tiles, under Triton's CPU interpreter
(``sampler_worker.py``): the tiny models' vocabularies fit a few tiles, so only here do the sample
op's passes skip the tiles that hold no id above their bound, and do its second draws (over the
allowed set, where the first falls outside it) and threshold searches run over many. Each row's
id must be the float64 reference's, given the same logits and uniforms, wherever its decisions
are not within fp32's rounding."""

import json
import os
import subprocess
import sys
from pathlib import Path

DECIDED = 1e-4  # as the step's numerics tests: a closer decision is not compared
# per row: temperature, top_k, top_p (greedy, plain temperature, top-k, top-p, both, and top-k 1
# at a high temperature: a first draw outside the allowed set, the second the argmax alone)
SETTINGS = [(0.0, 0, 1.0), (0.8, 0, 1.0), (1.0, 5, 1.0), (1.5, 0, 0.3), (1.2, 3, 0.9), (4.0, 1, 1.0),
            (1.0, 5, 1.0), (1.5, 0, 0.3), (1.2, 3, 0.9), (4.0, 1, 1.0), (2.0, 20, 0.5), (2.0, 0, 0.6)]
PEAKS = [8000, 100, 5000, 2100, 6500, 8150, 300, 60, 4100, 20, 1000, 7000]  # each row's likeliest ids


def _run_worker(case: dict) -> dict:
    """``sampler_worker.py``'s output for ``case``, run under the interpreter."""
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "sampler_worker.py"), json.dumps(case)],
                          env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_sampler_draws_the_references_ids_over_many_tiles():
    case = {"seed": int.from_bytes(os.urandom(4), "little"), "settings": SETTINGS, "vocab": 4 * 2048 + 100,
            "block_n": 128, "scale": 1.5,
            "peaks": PEAKS}
    out = _run_worker(case)
    assert all(out["ids"][b] == out["argmax"][b] for b in (0, 5, 9)), f"{case}: {out}"  # greedy, top-k 1
    decided = [b for b, margin in enumerate(out["margins"]) if margin > DECIDED]
    assert len(decided) >= 8, f"{case}: {out}"
    assert all(out["ids"][b] == out["wanted"][b] for b in decided), f"{case}: {out}"


# a verify band of 5 rows × 4 tokens, the speculative-sampling rule over every id, within top-k,
# within top-p, both (their boundaries among the rows' likeliest ids, where one id's mass decides them by
# more than fp32 rounds), and a greedy row
VERIFY_SETTINGS = [(1.0, 0, 1.0), (2.0, 5, 1.0), (1.5, 0, 0.03), (1.2, 40, 0.05), (0.0, 0, 1.0)]


def test_the_verdict_with_the_drafts_distributions_over_many_tiles():
    """The sample op's DRAFT_PROBS verdict over a vocabulary of many tiles (the correction's
    pass walks those that hold an allowed id: every one where every id is): each row's verdict
    is ``proposal_verdict``'s, given the same logits, draws and uniforms, wherever its decisions
    are not within fp32's rounding."""
    case = {"seed": int.from_bytes(os.urandom(4), "little"), "settings": VERIFY_SETTINGS, "tokens": 4,
            "vocab": 3 * 2048 + 77, "block_n": 128, "scale": 1.5,
            "peaks": [100, 2500, 4500, 6000, 3000]}
    out = _run_worker(case)
    decided = [b for b, margin in enumerate(out["verdict_margins"]) if margin > DECIDED]
    # the rows within top-p 0.03 and 0.05 decide against a bound often within fp32's rounding of
    # it (seed 1403382915: margins 7e-5 and 2e-5), so three of the five rows decided is the least
    assert len(decided) >= 3, f"{case}: {out}"
    for b in decided:
        assert [out["accepted"][b], out["emitted"][b]] == out["verdicts"][b], f"{case}: row {b}: {out}"



# per row: the tiles' floor from counts (top-k 5, 40; top-k 1: the best id alone), none (top-k
# past the tiles' number, a top-p over a flat distribution: every tile read), from the maxima's
# mass (a narrow top-p of a peaked row), both, and logits of bf16's precision, whose ids tie
THRESHOLD_SETTINGS = [(1.0, 5, 1.0), (1.0, 40, 1.0), (3.0, 1, 1.0), (1.0, 100, 1.0), (8.0, 0, 0.9), (0.3, 0, 0.5),
                      (1.2, 40, 0.05), (1.0, 7, 1.0), (2.0, 0, 0.2)]


def test_the_verdicts_allowed_set_is_the_references():
    """The threshold search of the DRAFT_PROBS verdict (``allowed_threshold``) over a vocabulary
    of 65 tiles: the ids at or above its threshold are ``allowed_distribution``'s set wherever its
    mass test is not within fp32's rounding of the bound, and its mass is the set's within fp32's
    rounding of the sums."""
    case = {"seed": int.from_bytes(os.urandom(4), "little"), "settings": THRESHOLD_SETTINGS, "threshold": True,
            "vocab": 4 * 2048 + 100, "block_n": 128, "scale": 1.5,
            "peaks": [100, 2500, 4500, 6000, 3000, 7000, 800, 5100, 1500], "bf16_rows": [7, 8]}
    out = _run_worker(case)
    decided = [b for b, margin in enumerate(out["set_margins"]) if margin > DECIDED]
    assert len(decided) >= 7, f"{case}: {out}"
    for b in decided:
        assert out["set_equal"][b] and out["mass_error"][b] < 1e-5, f"{case}: row {b}: {out}"
