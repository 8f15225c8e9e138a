"""`monobuild check`: the unmutated packages pass; each planted defect is caught with the right contract.

The defects are planted in a copy of a compiled package: in its manifest (the plan) or in its
emitted IR (PTX for sm_90, LLVM IR for gfx950), as a compiler bug or a careless edit would — the
layer's code object then built again from the planted IR (``rebuild_code``), as the compiler would
have built it — or in the code object alone, beside the IR it was not built from.
"""

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from monobuild.cli.main import main
from monobuild.compiler.contracts.check import check_package
from monobuild.compiler.contracts.ptx import parse_ptx
from monobuild.compiler.targets import TARGETS
from monobuild.compiler.toolchain import assemble, code_from_ir

from .conftest import rebuild_code, write_code

LAYER = "layer.r1t1.persistent"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The tiny Llama recipe (4 SMs, bands 1 and 2, both modes) compiled for sm_90 and gfx950, and
    its sm_90 debug build (waits that give up and log), which must keep every contract too."""
    from .conftest import compile_tiny

    root = tmp_path_factory.mktemp("contracts")
    return {"sm_90": compile_tiny(root)[1], "gfx950": compile_tiny(root, "--target", "gfx950", "--sm-count", "4")[1],
            "sm_90-debug": compile_tiny(root, "--debug-wait-spins", "1000")[1]}


@pytest.mark.parametrize("target", ["sm_90", "gfx950", "sm_90-debug"])
def test_unmutated_packages_pass(packages, target):
    report = check_package(packages[target])
    assert report.programs > 10
    assert report.ok, "\n".join(v.line() for v in report.violations)


# -- mutations ---------------------------------------------------------------------------------

def _manifest(pkg):
    return json.loads((pkg / "manifest.json").read_text())


def _edit_manifest(pkg, edit):
    doc = _manifest(pkg)
    edit(doc)
    (pkg / "manifest.json").write_text(json.dumps(doc))


def _program(doc, name=LAYER):
    return next(p for p in doc["programs"] if p["name"] == name)


def _region(doc, name, program=LAYER):
    return next(r for r in _program(doc, program)["regions"] if r["name"] == name)


def _ir(pkg, kind, program=LAYER):
    return pkg / "ir" / f"{program}.{kind}"


def _edit_lines(path, edit):
    lines = path.read_text().split("\n")
    path.write_text("\n".join(edit(lines)))


def _instr_line(path, pick):
    """The 0-based line of the first PTX instruction ``pick(ptx, instr, arg_names)`` selects."""
    pkg = path.parent.parent
    names = [a["name"] for a in _program(_manifest(pkg), path.name.rsplit(".", 1)[0])["args"]]
    ptx = parse_ptx(path.read_text())
    return next(i.line for i in ptx.instrs if pick(ptx, i, names)) - 1


def _from(ptx, ins, names, arg):
    return names.index(arg) in ptx.address_params(ins)


def _replace(pkg, kind, old, new, count=-1):
    path = _ir(pkg, kind)
    path.write_text(path.read_text().replace(old, new, count))


def dropped_release(pkg):
    _replace(pkg, "ptx", "atom.global.gpu.release.add", "atom.global.gpu.relaxed.add", 1)


def relaxed_wait(pkg):
    _replace(pkg, "ptx", "ld.global.gpu.acquire", "ld.global.gpu.relaxed")


def _sync_after(d, producer: str) -> int:
    return next(i for i, e in enumerate(_program(d)["syncs"]) if e["producer"] == producer)


def wrong_wait_target(pkg):
    _edit_manifest(pkg, lambda d: _program(d)["syncs"][_sync_after(d, "qkv")].__setitem__(
        "signals_per_epoch", _program(d)["grid"] - 1))


def missing_cta_barrier(pkg):
    """Delete every bar.sync between the last global store and the first signal."""
    path = _ir(pkg, "ptx")
    signal = _instr_line(path, lambda p, i, n: i.base == "atom" and _from(p, i, n, "counters"))

    def edit(lines):
        k = signal - 1
        while "st.global" not in lines[k]:
            if "bar.sync" in lines[k]:
                lines[k] = ""
            k -= 1
        return lines

    _edit_lines(path, edit)


def grid_one_too_large(pkg):
    def edit(d):
        p = _program(d)
        p["grid"] = p["resources"]["ctas_per_unit"] * d["sm_count"] + 1
        for sync in p["syncs"]:  # a consistent plan for the bigger grid: only residency is wrong
            sync["signals_per_epoch"] = p["grid"]

    _edit_manifest(pkg, edit)


def spilling_program(pkg):
    _edit_manifest(pkg, lambda d: _program(d)["resources"].__setitem__("spill_bytes", 64))


def misreported_occupancy(pkg):
    _edit_manifest(pkg, lambda d: _program(d)["resources"].__setitem__("ctas_per_unit", 9))


def read_before_sync(pkg):
    _edit_manifest(pkg, lambda d: _program(d)["syncs"].pop(_sync_after(d, "o")))  # the edge after o, before x1's readers


def dead_row_stores(pkg):
    path = _ir(pkg, "ptx")
    line = _instr_line(path, lambda p, i, n: i.base == "st" and _from(p, i, n, "k_cache"))
    _edit_lines(path, lambda lines: [*lines[:line], re.sub(r"@!?%p\d+\s+", "", lines[line]), *lines[line + 1:]])


def nc_load_of_scratch(pkg):
    path = _ir(pkg, "ptx")
    line = _instr_line(path, lambda p, i, n: i.opcode.startswith("ld.global.cg") and _from(p, i, n, "qkv"))
    _edit_lines(path, lambda lines: [*lines[:line], lines[line].replace("ld.global.cg", "ld.global.nc"),
                                     *lines[line + 1:]])


def extra_wait_site(pkg):
    """A second wait loop on the first edge's counter, right after the first signal."""
    path = _ir(pkg, "ptx")
    ptx = parse_ptx(path.read_text())
    names = [a["name"] for a in _program(_manifest(pkg))["args"]]
    signal = next(i for i in ptx.instrs if i.base == "atom" and _from(ptx, i, names, "counters"))
    loop = ["{", "\t.reg .b64 %rd_planted;", "\t.reg .pred %p_planted;", "$L__planted_wait:",
            f"\tld.global.gpu.acquire.b64 %rd_planted, [ {signal.address} + 0 ];",
            "\tsetp.lt.s64 %p_planted, %rd_planted, 0;", "\t@%p_planted bra $L__planted_wait;", "}"]
    _edit_lines(path, lambda lines: [*lines[:signal.line], *loop, *lines[signal.line:]])


def epochs_wrap(pkg):
    _edit_manifest(pkg, lambda d: d["deployment"].__setitem__("lifetime_steps", 2**62))


def pdl_without_wait(pkg):
    path = _ir(pkg, "ptx")
    _edit_lines(path, lambda lines: [x for x in lines if "griddepcontrol.wait" not in x])


def pdl_launch_not_waited(pkg):
    """The manifest launches the layer with PDL but records that its code never waits for the
    previous launch."""
    _edit_manifest(pkg, lambda d: _program(d)["launch"].__setitem__("pdl_wait", False))


def not_cooperative(pkg):
    """The persistent layer launched without the cooperative attribute (which is what makes the
    driver refuse a grid that cannot be co-resident)."""
    _edit_manifest(pkg, lambda d: _program(d)["launch"].__setitem__("cooperative", False))


def counter_block_too_small(pkg):
    """The launch's counter block holds fewer counters than the layer's edges use: the last edges'
    signals would land in the next launch's counters."""
    _edit_manifest(pkg, lambda d: _program(d).__setitem__("counters", 2))


def binary_of_relaxed_ptx(pkg):
    """The code object assembled from PTX whose first signal is relaxed, shipped beside the PTX
    it was not built from (and the manifest's sha256 made to match it)."""
    ptx = _ir(pkg, "ptx").read_text().replace("atom.global.gpu.release.add", "atom.global.gpu.relaxed.add", 1)
    write_code(pkg, LAYER, assemble(ptx, TARGETS["sm_90"]))


def binary_of_relaxed_llir(pkg):
    """gfx950: the code object built from LLVM IR whose signal is relaxed, beside the IR and
    AMDGCN it was not built from."""
    llir = _ir(pkg, "llir").read_text().replace('syncscope("agent") release', 'syncscope("agent") monotonic', 1)
    write_code(pkg, LAYER, code_from_ir(llir, TARGETS["gfx950"])[0])


def amdgcn_not_of_its_llir(pkg):
    """gfx950: the AMDGCN (whose metadata residency reads) edited, the code object assembled from
    it, the LLVM IR left as it was."""
    t = TARGETS["gfx950"]
    path = _ir(pkg, "amdgcn")
    amdgcn = path.read_text().replace("s_endpgm", "s_nop 0\n\ts_endpgm", 1)
    path.write_text(amdgcn)
    write_code(pkg, LAYER, assemble(amdgcn, t))


def tampered_code(pkg):
    """A byte of the layer's code object changed after the package was written (its IR unchanged)."""
    code = pkg / _program(json.loads((pkg / "manifest.json").read_text()))["code"]
    data = bytearray(code.read_bytes())
    data[len(data) // 2] ^= 0x01
    code.write_bytes(bytes(data))


def overwrite_in_flight(pkg):
    """The layer writes its output over its input (x_out = x_in, written by down) with no edge
    ordering the input's reader o before down."""
    def edit(d):
        _region(d, "x_in")["writer"] = "down"
        p = _program(d)
        p["syncs"] = [s for s in p["syncs"] if (s["producer"], s["consumer"]) != ("up", "down")]

    _edit_manifest(pkg, edit)


def undeclared_same_stage_read(pkg):
    _edit_manifest(pkg, lambda d: _region(d, "k_cache").__setitem__("same_stage", None))


def amd_dead_row_stores(pkg):
    """The branch that skips a dead row's KV append taken unconditionally (`br i1 true`)."""
    from monobuild.compiler.contracts.llir import LlvmFunction

    path = _ir(pkg, "llir")
    text = path.read_text()
    fn = LlvmFunction(text)
    names = [a["name"] for a in _program(_manifest(pkg))["args"]]
    store = next(i for i in fn.instrs if i.opcode == "store" and names.index("k_cache") in fn.pointer_params(i))
    guard = [i for i in fn.instrs if i.block == fn.pred[store.block][0]][-1].text
    path.write_text(text.replace(guard, re.sub(r"br i1 %[\w.]+,", "br i1 true,", guard), 1))


def amd_relaxed_signal(pkg):
    _replace(pkg, "llir", 'syncscope("agent") release', 'syncscope("agent") monotonic', 1)


def amd_relaxed_wait(pkg):
    _replace(pkg, "llir", 'syncscope("agent") acquire', 'syncscope("agent") monotonic')


def abi_names_swapped(pkg):
    """The first and last layer weights' names swapped in the ABI: the runtime, which binds by
    name, would pass the down projection where the code reads the attention norm's weight."""
    def edit(d):
        weights = [a for a in _program(d)["args"] if a["role"] == "layer_weight"]
        first, last = weights[0], weights[-1]
        first["name"], last["name"] = last["name"], first["name"]

    _edit_manifest(pkg, edit)


def block_not_the_codes(pkg):
    """The layer launched with half the threads it was compiled for (and the record's threads to
    match): on gfx9 nothing would stop it, and half of every tile would go uncomputed."""
    def edit(d):
        p = _program(d)
        p["block"] //= 2
        p["resources"]["threads"] = p["block"]

    _edit_manifest(pkg, edit)


def misreported_registers(pkg):
    _edit_manifest(pkg, lambda d: _program(d)["resources"].__setitem__("registers", 32))


def edited_fingerprint(pkg):
    _edit_manifest(pkg, lambda d: _program(d).__setitem__("fingerprint", "0" * 64))


def edited_cache_key(pkg):
    _edit_manifest(pkg, lambda d: _program(d).__setitem__("cache_key", "0" * 64))


def step_skips_a_layer(pkg):
    """The first step's launches lose the last decoder layer's (the head then reads layer L-2's output)."""
    def edit(d):
        launches = d["steps"][0]["launches"]
        last = max(x["layer"] for x in launches if x["layer"] is not None)
        d["steps"][0]["launches"] = [x for x in launches if x["layer"] != last]

    _edit_manifest(pkg, edit)


def _first_wait_compare(pkg):
    """(PTX text, the compare line of the layer's first wait loop, the target register it reads)."""
    path = _ir(pkg, "ptx")
    ptx = parse_ptx(path.read_text())
    compare = next(i for i in ptx.instrs if i.base == "setp" and i.has("s64") and ptx.in_loop(i.index) is not None)
    return path, ptx, compare.operands[2]


def lowered_wait_target(pkg):
    """The wait target's constant lowered by one in the code (`… + 8` → `… + 7`): every wait of
    the layer is over one signal early."""
    path, ptx, target = _first_wait_compare(pkg)
    define = next(i for i in ptx.instrs if i.operands and i.operands[0] == target)
    _edit_lines(path, lambda lines: [*lines[:define.line - 1],
                                     re.sub(r"(\d+);$", lambda m: f"{int(m.group(1)) - 1};", lines[define.line - 1]),
                                     *lines[define.line:]])


def signal_to_another_counter(pkg):
    """The second signal's address displaced by 8 B: it adds to the third edge's counter, while
    the second edge's waits keep reading their own."""
    path = _ir(pkg, "ptx")
    line = _instr_line(path, lambda p, i, n: i.base == "atom" and _from(p, i, n, "counters") and i.has("release")
                       and "+ 0 ]" in ",".join(i.operands) and i.address != _first_signal_address(p, n))
    _edit_lines(path, lambda lines: [*lines[:line], lines[line].replace("+ 0 ]", "+ 8 ]"), *lines[line + 1:]])


def _first_signal_address(ptx, names):
    return next(i.address for i in ptx.instrs if i.base == "atom" and _from(ptx, i, names, "counters"))


def relaxed_first_poll(pkg):
    """The first wait's first poll (before its loop, the fast path) relaxed; the loop stays acquire."""
    path = _ir(pkg, "ptx")
    line = _instr_line(path, lambda p, i, n: i.opcode == "ld.global.gpu.acquire.b64" and p.in_loop(i.index) is None)
    _edit_lines(path, lambda lines: [*lines[:line], lines[line].replace(".acquire.", ".relaxed."), *lines[line + 1:]])


def _amd_first_wait(pkg):
    """(LLVM IR path, text, the first wait loop's poll, the target value its compare reads)."""
    from monobuild.compiler.contracts.llir import LlvmFunction

    path = _ir(pkg, "llir")
    text = path.read_text()
    fn = LlvmFunction(text)
    poll = next(i for i in fn.instrs if i.opcode == "atomicrmw" and " acquire" in i.text and i.block in fn.loop_of)
    compare = next(i for i in fn.instrs[poll.index:] if i.opcode == "icmp" and " i64 " in i.text)
    return path, text, fn, poll, compare.text.rsplit(", ", 1)[1]


def amd_lowered_wait_target(pkg):
    path, text, fn, _, target = _amd_first_wait(pkg)
    define = next(i.text for i in fn.instrs if i.result == target)
    path.write_text(text.replace(define, re.sub(r"(\d+)$", lambda m: str(int(m.group(1)) - 1), define), 1))


def amd_signal_to_another_counter(pkg):
    """The second signal's pointer moved 8 B on, through a getelementptr of its own."""
    from monobuild.compiler.contracts.llir import LlvmFunction

    path = _ir(pkg, "llir")
    text = path.read_text()
    fn = LlvmFunction(text)
    signal = [i for i in fn.instrs if i.opcode == "atomicrmw" and " add " in i.text and " release" in i.text][1]
    pointer = re.search(r"ptr addrspace\(1\) (%[\w.]+)", signal.text).group(1)
    planted = f"%planted.counter = getelementptr i8, ptr addrspace(1) {pointer}, i64 8\n  " + \
        signal.text.replace(f"ptr addrspace(1) {pointer},", "ptr addrspace(1) %planted.counter,")
    path.write_text(text.replace(signal.text, planted, 1))


def amd_relaxed_first_poll(pkg):
    """A fast path before the first wait loop: a relaxed poll that skips the loop when it already
    sees the target (Triton emits none on gfx9; a hand edit or another compiler could)."""
    path, text, fn, poll, target = _amd_first_wait(pkg)
    entry = next(b for b in fn.pred[poll.block] if fn.loop_of.get(b) != fn.loop_of[poll.block])
    exit_ = next(b for b in fn.blocks if fn.loop_of.get(b) != fn.loop_of[poll.block]
                 and set(fn.pred[b]) & {x for x in fn.blocks if fn.loop_of.get(x) == fn.loop_of[poll.block]})
    branch = fn.body[entry][-1].text
    pointer = re.search(r"ptr addrspace\(1\) (%[\w.]+)", poll.text).group(1)
    fast = (f"%fast.seen = atomicrmw or ptr addrspace(1) {pointer}, i64 0 syncscope(\"agent\") monotonic, align 8\n"
            f"  %fast.done = icmp sge i64 %fast.seen, {target}\n"
            f"  br i1 %fast.done, label {exit_}, label %fast.wait\n\nfast.wait:\n  {branch}")
    path.write_text(text.replace(branch, fast, 1))


DEFECTS = [
    ("sm_90", dropped_release, "I1", "ptx line"),
    ("sm_90", relaxed_wait, "I2", "ptx line"),
    ("sm_90", wrong_wait_target, "C1", "sync qkv→attn"),
    ("sm_90", missing_cta_barrier, "I1", "ptx line"),
    ("sm_90", grid_one_too_large, "C3", "launch"),
    ("sm_90", spilling_program, "C3", "launch"),
    ("sm_90", misreported_occupancy, "C3", "launch"),
    ("sm_90", read_before_sync, "C1", "region x1"),
    ("sm_90", dead_row_stores, "C4", "ptx line"),
    ("sm_90", nc_load_of_scratch, "I3", "ptx line"),
    ("sm_90", extra_wait_site, "I4", "ptx"),
    ("sm_90", epochs_wrap, "C5", "counters"),
    ("sm_90", pdl_without_wait, "C2", "ptx"),
    ("sm_90", pdl_launch_not_waited, "C2", "launch"),
    ("sm_90", counter_block_too_small, "C1", "sync attn→combine"),
    ("sm_90", not_cooperative, "C3", "launch"),
    ("gfx950", not_cooperative, "C3", "launch"),
    ("sm_90", tampered_code, "I0", "code"),
    ("gfx950", tampered_code, "I0", "code"),
    ("sm_90", binary_of_relaxed_ptx, "I0", "code"),
    ("gfx950", binary_of_relaxed_llir, "I0", "code"),
    ("gfx950", amdgcn_not_of_its_llir, "I0", "code"),
    ("sm_90", overwrite_in_flight, "C2", "region x_in"),
    ("sm_90", undeclared_same_stage_read, "C1", "region k_cache"),
    ("gfx950", amd_relaxed_signal, "I1", "llir block"),
    ("gfx950", amd_dead_row_stores, "C4", "llir block"),
    ("gfx950", amd_relaxed_wait, "I2", "llir block"),
    ("sm_90", lowered_wait_target, "I5", "ptx line"),
    ("gfx950", amd_lowered_wait_target, "I5", "llir block"),
    ("sm_90", signal_to_another_counter, "I5", "ptx line"),
    ("gfx950", amd_signal_to_another_counter, "I5", "llir block"),
    ("sm_90", relaxed_first_poll, "I2", "ptx line"),
    ("sm_90", abi_names_swapped, "P0", "manifest"),
    ("gfx950", abi_names_swapped, "P0", "manifest"),
    ("sm_90", step_skips_a_layer, "P0", "steps[0]"),
    ("sm_90", block_not_the_codes, "C3", "launch"),
    ("gfx950", block_not_the_codes, "C3", "launch"),
    ("sm_90", misreported_registers, "C3", "launch"),
    ("sm_90", edited_fingerprint, "I0", "code"),
    ("gfx950", edited_fingerprint, "I0", "code"),
    ("sm_90", edited_cache_key, "P0", "manifest"),
    ("gfx950", edited_cache_key, "P0", "manifest"),
    ("gfx950", step_skips_a_layer, "P0", "steps[0]"),
    ("gfx950", amd_relaxed_first_poll, "I2", "llir block"),
]


#: the defects planted in the code object or its fingerprint, which the package is not rebuilt after
#: (the rest are planted in the IR or the plan, and the code object built as the compiler would)
NOT_REBUILT = {tampered_code, binary_of_relaxed_ptx, binary_of_relaxed_llir, amdgcn_not_of_its_llir, edited_fingerprint}


@pytest.mark.parametrize("target,plant,contract,where", DEFECTS, ids=[d[1].__name__ for d in DEFECTS])
def test_each_planted_defect_is_caught(packages, tmp_path, target, plant, contract, where):
    pkg = tmp_path / "pkg"
    shutil.copytree(packages[target], pkg)
    plant(pkg)
    if plant not in NOT_REBUILT:
        rebuild_code(pkg, LAYER)
    report = check_package(pkg)
    caught = [v for v in report.violations if v.contract == contract and v.program == LAYER and v.where.startswith(where)]
    assert caught, "\n".join(v.line() for v in report.violations) or "no violation reported"
    if plant is not epochs_wrap:  # the lifetime is the deployment's: every persistent program wraps
        assert all(v.program == LAYER for v in report.violations), "the defect leaked into other programs' reports"


def test_check_cli_exit_codes_and_lines(packages, tmp_path):
    ok = CliRunner().invoke(main, ["check", str(packages["sm_90"])])
    assert ok.exit_code == 0 and "every contract holds" in ok.output
    pkg = tmp_path / "pkg"
    shutil.copytree(packages["sm_90"], pkg)
    dropped_release(pkg)
    rebuild_code(pkg, LAYER)
    bad = CliRunner().invoke(main, ["check", str(pkg), "--json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.stdout)
    assert doc[0]["violations"][0]["contract"] == "I1" and doc[0]["violations"][0]["program"] == LAYER
    text = CliRunner().invoke(main, ["check", str(pkg)])
    assert re.search(rf"^{re.escape(LAYER)}: ptx line \d+: I1 release signals: ", text.stdout, re.M)
    missing = CliRunner().invoke(main, ["check", str(tmp_path / "nowhere.yaml")])
    assert missing.exit_code == 2 and missing.output.count("\n") == 1


_CALLING_PTX = """
.func callee(.param .b64 callee_param_0, .param .b64 callee_param_1);
.visible .entry kern(
	.param .u64 kern_param_0,
	.param .u64 kern_param_1
)
{
	ld.param.b64 	%rd1, [kern_param_1];
	ld.param.b64 	%rd2, [kern_param_0];
	{ // callseq 0, 0
	.param .b64 	param0;
	.param .b64 	param1;
	st.param.b64 	[param0], %rd1;
	st.param.b64 	[param1], %rd2;
	call.uni callee, (param0, param1);
	} // callseq 0
	st.global.b32 	[%rd1], %r1;
	ret;
}
.func callee(
	.param .b64 callee_param_0,
	.param .b64 callee_param_1
)
{
	ld.param.b64 	%rd1, [callee_param_0];
	ld.param.b64 	%rd2, [callee_param_1];
	ld.global.cg.b32 	%r1, [%rd2];
	st.global.b32 	[%rd1], %r1;
	ret;
}
"""


def test_ptx_provenance_follows_a_call_into_the_callee():
    """A jit function Triton does not inline is a .func the kernel calls: its parameters take
    what the caller stored into the argument slots of their position (here swapped: the callee's
    first parameter is the kernel's second), and each function's registers are its own (%rd1 is
    a different register in each)."""
    ptx = parse_ptx(_CALLING_PTX)
    assert ptx.functions == ("kern", "callee")
    load, = (i for i in ptx.instrs if i.opcode == "ld.global.cg.b32")
    stores = {i.function: i for i in ptx.instrs if i.opcode == "st.global.b32"}
    assert load.function == 1 and ptx.address_params(load) == {0}
    assert ptx.address_params(stores[1]) == {1} and ptx.address_params(stores[0]) == {1}
