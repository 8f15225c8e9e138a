"""`monobuild check` on routed (mixture-of-experts) layer programs, whose task lists depend on what
routing chose at run time: the unmutated packages pass, and the defects that make an edge's count
depend on routing are caught.

An edge stays total whatever routing chose only if every CTA signals it once a step and every
wait counts one signal a CTA: a signal moved into the routing-dependent task loop (it then adds
once a task) is caught by the once-a-step rule (I4), a wait target computed from the step's
routing record instead of the epoch read by I5.
"""

import re
import shutil

import pytest

from monobuild.compiler.contracts.check import check_package
from monobuild.compiler.contracts.ptx import parse_ptx

from .conftest import rebuild_code
from .test_contracts import _from, _manifest, _program

ROUTED = "moe.r1t1.persistent"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The tiny Qwen3-MoE recipe (a dense layer between two routed ones; 4 SMs, bands 1 and 2,
    both modes) compiled for sm_90 and gfx950."""
    from .conftest import compile_tiny

    root = tmp_path_factory.mktemp("routed")
    return {"sm_90": compile_tiny(root, config="tiny-qwen3-moe.json")[1],
            "gfx950": compile_tiny(root, "--target", "gfx950", "--sm-count", "4", config="tiny-qwen3-moe.json")[1]}


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_unmutated_routed_packages_pass(packages, target):
    report = check_package(packages[target])
    names = {p["name"] for p in _manifest(packages[target])["programs"]}
    assert ROUTED in names and "layer.r1t1.persistent" in names  # both layer programs
    assert report.ok, "\n".join(v.line() for v in report.violations)


def _edge(pkg, producer: str) -> int:
    return next(e["counter"] for e in _program(_manifest(pkg), ROUTED)["syncs"] if e["producer"] == producer)


def _ptx(pkg):
    path = pkg / "ir" / f"{ROUTED}.ptx"
    return path, parse_ptx(path.read_text())


def _names(pkg):
    return [a["name"] for a in _program(_manifest(pkg), ROUTED)["args"]]


def signal_inside_the_expert_loop(pkg):
    """experts_up's signal moved into its task loop, whose trip count is what routing chose."""
    path, ptx = _ptx(pkg)
    names = _names(pkg)
    signals = [i for i in ptx.instrs if i.base == "atom" and i.has("release") and _from(ptx, i, names, "counters")]
    signal = signals[_edge(pkg, "experts_up")]
    loops = [(head, body) for head, body in ptx.loops if max(body) < signal.index
             and any("mma" in ptx.instrs[k].opcode for k in body)]
    head = max(loops)[0]
    lines = path.read_text().split("\n")
    text = lines.pop(signal.line - 1)
    lines.insert(ptx.instrs[head].line, text)  # after the loop's first instruction
    path.write_text("\n".join(lines))


def wait_target_from_routing(pkg):
    """experts_down's wait compares the count with the routing record's expert count (the slots'
    tasks) instead of the epoch's end: the target then depends on what routing chose."""
    path, ptx = _ptx(pkg)
    names = _names(pkg)
    k = _edge(pkg, "experts_up")
    polls = [i for i in ptx.instrs if i.opcode.startswith("ld.global.gpu.acquire") and ptx.in_loop(i.index) is not None
             and _from(ptx, i, names, "counters")]
    poll = polls[k]
    loop = ptx.in_loop(poll.index)
    compare = next(i for i in ptx.instrs if i.base == "setp" and i.has("s64") and ptx.in_loop(i.index) == loop)
    target = compare.operands[2]  # the count, broadcast from the poll, against the target
    kernel = re.search(r"\.entry\s+(\w+)", path.read_text()).group(1)
    lines = path.read_text().split("\n")
    lines[compare.line - 1] = lines[compare.line - 1].replace(target, "%planted_target")
    lines[compare.line - 1:compare.line - 1] = [
        "\t.reg .b64 %planted_routed, %planted_target;", "\t.reg .b32 %planted_count;",
        f"\tld.param.b64 %planted_routed, [{kernel}_param_{names.index('routed')}];",
        "\tld.global.cg.b32 %planted_count, [%planted_routed];",
        "\tcvt.s64.s32 %planted_target, %planted_count;"]
    path.write_text("\n".join(lines))


def amd_signal_inside_the_expert_loop(pkg):
    """On gfx950: experts_up's signal moved into its task loop (after the loop body's phis), its
    counter's address taken there from the counters parameter and its old value number kept by a
    plain add, so the IR stays well-formed."""
    from monobuild.compiler.contracts.llir import LlvmFunction

    path = pkg / "ir" / f"{ROUTED}.llir"
    text = path.read_text()
    fn = LlvmFunction(text)
    signals = [i for i in fn.instrs if i.opcode == "atomicrmw" and " add " in i.text and " release" in i.text]
    signal = signals[_edge(pkg, "experts_up")]
    pointer = re.search(r"ptr addrspace\(1\) (%[\w.]+),", signal.text).group(1)
    base, offset = re.search(rf"{re.escape(pointer)} = getelementptr i8, ptr addrspace\(1\) (%[\w.]+), i64 (\d+)",
                             text).groups()
    before = fn.blocks[: fn.blocks.index(signal.block)]
    mfma = {fn.loop_of[b] for b in before if b in fn.loop_of and any("mfma" in i.text for i in fn.body[b])}
    block = [b for b in before if fn.loop_of.get(b) in mfma][-1]
    anchor = next(i.text for i in fn.body[block] if i.opcode != "phi")
    result, atomic = signal.text.split(" = ", 1)
    moved = (f"%planted.counter = getelementptr i8, ptr addrspace(1) {base}, i64 {offset}\n  %planted.signal = "
             + atomic.replace(f"ptr addrspace(1) {pointer},", "ptr addrspace(1) %planted.counter,") + "\n  ")
    text = text.replace(signal.text, f"{result} = add i64 0, 0", 1)  # its value keeps its number, unsignalled
    path.write_text(text.replace(anchor, moved + anchor, 1))


DEFECTS = [
    ("sm_90", signal_inside_the_expert_loop, "I4", "ptx line"),
    ("sm_90", wait_target_from_routing, "I5", "ptx line"),
    ("gfx950", amd_signal_inside_the_expert_loop, "I4", "llir block"),
]


@pytest.mark.parametrize("target,plant,contract,where", DEFECTS, ids=[d[1].__name__ for d in DEFECTS])
def test_each_routing_dependent_defect_is_caught(packages, tmp_path, target, plant, contract, where):
    pkg = tmp_path / "pkg"
    shutil.copytree(packages[target], pkg)
    plant(pkg)
    rebuild_code(pkg, ROUTED)
    report = check_package(pkg)
    caught = [v for v in report.violations if v.contract == contract and v.program == ROUTED and v.where.startswith(where)]
    assert caught, "\n".join(v.line() for v in report.violations) or "no violation reported"
    assert all(v.program == ROUTED for v in report.violations), "the defect leaked into other programs' reports"


@pytest.mark.parametrize("target", ["sm_90", "gfx942", "gfx950"])
def test_fp8_routed_packages_pass(tmp_path, target):
    """An FP8 checkpoint's routed programs (E4M3 experts, each expert's block scales) compile for
    every target and hold their contracts."""
    from .conftest import compile_tiny

    options = () if target == "sm_90" else ("--target", target, "--sm-count", "4")
    pkg = compile_tiny(tmp_path, *options, config="tiny-qwen3-moe-fp8.json")[1]
    args = {a["name"]: a["type"] for a in _program(_manifest(pkg), ROUTED)["args"]}
    assert args["w_experts_gate_up"] == "*fp8e4nv" and args["w_experts_down_scale"] == "*fp32"
    report = check_package(pkg)
    assert report.ok, "\n".join(v.line() for v in report.violations)
