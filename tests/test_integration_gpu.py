"""Generation with a package on a GPU against ``model.generate(do_sample=False)``.

Marked ``gpu``; skipped without a CUDA device or without ``MONOBUILD_TEST_PACKAGES`` holding
``llama-3.2-1b-sm_90/sm_90``. The model is transformers' Llama-3.2-1B in bf16 with random weights;
the package binds the same weights. Greedy ids must equal ``generate``'s wherever its top-2
margin decides them: each row is compared up to its first difference, which must fall where
``generate``'s margin is at most twice the largest logit difference between the two at that
token (only there can rounding swap the top two); the rows' ids after it follow other inputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

PACKAGES = os.environ.get("MONOBUILD_TEST_PACKAGES")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not PACKAGES or not (Path(PACKAGES) / "llama-3.2-1b-sm_90" / "sm_90" / "manifest.json").exists():
    pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-sm_90/sm_90", allow_module_level=True)
transformers = pytest.importorskip("transformers")

from monobuild import runtime  # noqa: E402
from monobuild.bench.cases import random_state_dict  # noqa: E402
from monobuild.bench.hf import hf_model  # noqa: E402
from monobuild.integrations.transformers import Decoder, decode, left_padded  # noqa: E402

LLAMA = Path(PACKAGES) / "llama-3.2-1b-sm_90" / "sm_90"
CONFIG = Path(__file__).resolve().parent.parent / "recipes" / "configs" / "llama-3.2-1b.json"
NEW = 48


@pytest.fixture(scope="module")
def decoder():
    pkg = runtime.load(LLAMA)
    model = hf_model(CONFIG, random_state_dict(pkg, seed=5), torch.bfloat16, pkg.device)
    model.generation_config.eos_token_id = None  # the config's end-of-sequence ids: no row ends early
    return Decoder(model, pkg)


def _prompts(rows: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 600, (rows,), generator=gen).tolist()
    return [torch.randint(0, 128256, (n,), generator=gen).cuda() for n in lengths]


def _hf_generate(model, prompts, new: int):
    ids, mask = left_padded(prompts)
    width = ids.shape[1]
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=0,
                                           output_logits=True, return_dict_in_generate=True)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return out.sequences[:, width:], torch.stack(out.logits, 1).float()  # [rows, new], [rows, new, vocab]


@pytest.mark.parametrize("rows", [1, 4, 8])
def test_greedy_ids_are_generates_wherever_its_margin_decides(decoder, rows):
    prompts = _prompts(rows, seed=rows)
    got = decoder.generate(prompts, NEW)  # in the CUDA graph
    want, hf_logits = _hf_generate(decoder.model, prompts, NEW)

    ours = []  # the same steps run eagerly, their logits kept: the ids must be the graph's
    step = decoder.step_for(0)

    def logged(*inputs):
        ids = step(*inputs)
        ours.append(step.logits.float().clone())
        return ids

    eager = [sum(c, []) for c in zip(*decode(decoder.model, logged, decoder.kv_cache, prompts, NEW, graph=False))]
    assert eager == got
    with torch.no_grad():
        first = torch.stack([decoder.model(p[None], logits_to_keep=1).logits[0, -1].float() for p in prompts])
    ours = torch.stack([first, *ours], 1)  # [rows, new, vocab]
    decided = 0
    for b in range(rows):
        top2 = hf_logits[b].topk(2, -1).values
        margin = top2[:, 0] - top2[:, 1]
        slack = 2 * (ours[b] - hf_logits[b]).abs().amax(-1)
        same = torch.tensor(got[b], device=want.device) == want[b]
        differs = (~same).nonzero()
        upto = int(differs[0]) if differs.numel() else NEW
        decided += int((margin[:upto] > slack[:upto]).sum())
        if upto < NEW:
            assert margin[upto] <= slack[upto], (
                f"row {b}: id {upto} differs from generate's where its margin {margin[upto]:.3g} decides it "
                f"(twice the logit difference: {slack[upto]:.3g})")
    print(f"{rows} rows: {decided} decided ids compared equal")
    assert decided > 0  # the comparison is not empty


def test_a_row_ends_at_its_end_of_sequence_id(decoder):
    prompts = _prompts(3, seed=11)
    free = decoder.generate(prompts, 16)
    eos = free[1][3]
    ended = decoder.generate(prompts, 16, eos_token_id=eos)
    for b in range(3):
        end = free[b].index(eos) + 1 if eos in free[b] else 16
        assert ended[b] == free[b][:end]


SAMPLE = Path(PACKAGES) / "llama-3.2-1b-sample-sm_90" / "sm_90"


@pytest.fixture(scope="module")
def sampling_decoder():
    if not (SAMPLE / "manifest.json").exists():
        pytest.skip("MONOBUILD_TEST_PACKAGES does not hold llama-3.2-1b-sample-sm_90/sm_90 "
                    "(docs/measurements/2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml)")
    pkg = runtime.load(SAMPLE)
    model = hf_model(CONFIG, random_state_dict(pkg, seed=5), torch.bfloat16, pkg.device)
    model.generation_config.eos_token_id = None
    return Decoder(model, pkg)


def test_sampled_generation_reproduces_and_stays_within_each_rows_top_k(sampling_decoder):
    """Sampled rows through the integration, in the CUDA graph: the same seeds give the same ids,
    other seeds others; each sampled id lies within its row's top-k of the model's own logits
    (transformers, teacher-forced over the sequence), up to what bf16 moves a logit; a row of
    temperature 0 draws nothing (no seed changes it). Random weights with a tied head make the
    input id all but certain, so the temperatures are high enough to spread the draws over the
    top-k."""
    rows, new = 3, 24
    prompts = _prompts(rows, seed=6)
    settings = {"temperature": [0.0, 500.0, 1000.0], "top_k": [0, 5, 3], "top_p": [1.0, 1.0, 1.0]}
    first = sampling_decoder.generate(prompts, new, seed=[1, 2, 3], **settings)
    again = sampling_decoder.generate(prompts, new, seed=[1, 2, 3], **settings)
    other = sampling_decoder.generate(prompts, new, seed=[1, 7, 8], **settings)
    assert first == again and first[1] != other[1] and first[2] != other[2]
    assert first[0] == other[0]  # greedy: no seed matters
    model = sampling_decoder.model
    for b, k in ((1, 5), (2, 3)):
        sequence = torch.cat([prompts[b], torch.tensor(first[b], device=prompts[b].device)])
        with torch.no_grad():
            logits = model(sequence[None]).logits[0, prompts[b].numel() - 1: -1].float()
        top = logits.topk(k, -1).values
        drawn = logits.gather(1, torch.tensor(first[b], device=logits.device)[:, None])[:, 0]
        # within the top-k: at least the k-th largest logit, less what bf16 moves a logit (the
        # transformers check's bound, relative to the largest)
        slack = 0.03 * top[:, 0].abs()
        assert (drawn >= top[:, k - 1] - slack).all(), f"row {b}: an id outside its top-{k}"
