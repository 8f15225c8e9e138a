"""The toolchain step: a Program becomes a CodeObject for a target, on a machine with no GPU.

Triton compiles the emitted kernel to LLVM IR and then to a cubin (sm_90, through the ptxas
bundled with Triton) or an hsaco (gfx942/gfx950, through the AMD linker inside libtriton).
Line info is off so that the code objects do not depend on where the sources live; the
package is byte-identical wherever it is built.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..schema import TensorMap
from .emit import Program
from .errors import CompileError
from .resources import Resources, amd_resources, nvidia_resources
from .targets import Target

IR_TEXTS = {"cuda": ("llir", "ptx"), "hip": ("llir", "amdgcn")}
CHECKED_IR = {"cuda": "ptx", "hip": "llir"}  # the IR the contracts are proved on, and the code object built from
# The flags Triton 3.6's last step gives ptxas with line info off (and its defaults: fp fusion on,
# no extra options), so that ``assemble`` makes the very cubin ``compile_program`` shipped.
PTXAS_FLAGS = ("-lineinfo", "-suppress-debug-info", "-v")


@dataclass(frozen=True)
class CodeObject:
    program: str
    target: str
    symbol: str  # the kernel's name inside the binary
    binary: bytes  # cubin or hsaco
    ir: tuple[tuple[str, str], ...]  # (llir, text), (ptx | amdgcn, text)
    shared_bytes: int  # dynamic shared memory to pass at launch
    num_warps: int
    resources: Resources
    fingerprint: str  # sha256 of the LLVM IR
    tensor_maps: tuple[TensorMap, ...] = ()  # the TMA descriptor arguments, in ABI order

    def ir_text(self, kind: str) -> str:
        return dict(self.ir)[kind]


def triton_source(fn, signature: dict[str, str], constexprs: dict):
    """Triton's compile input for ``fn``: its runtime parameters typed by ``signature``, the rest
    given by ``constexprs``. Every pointer is 16-byte aligned (the runtime checks at bind), which
    allows 16-byte loads."""
    from triton.compiler import ASTSource

    signature = {**signature, **{n: "constexpr" for n in constexprs}}
    missing = [n for n in fn.arg_names if n not in signature]
    if missing:
        raise CompileError(f"{fn.__name__}: no value for {', '.join(missing)}")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if signature[n].startswith("*")}
    if fn.is_gluon():  # a Gluon kernel (the streaming floor) has its own front end
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return ASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs)


# ptxas's own register heuristic aims at more CTAs per SM than a persistent program asks for and
# then keeps a few values in a local-memory stack frame (seen: Qwen3 layer programs at 168
# registers, 16 B of stack). A persistent program must not touch local memory (contract C3), so
# one that does is compiled again with the whole register file a thread may have.
MAX_REGISTERS = 255


# Triton's knobs are process-wide: two threads compiling at once (``monobuild tune`` builds its
# candidates concurrently) would share, and delete, each other's cache directory.
_KNOBS = threading.Lock()
# Triton's LLVM (the AMDGCN translation, assembler and linker) is driven through one process-wide
# state: ``check`` rebuilds programs from several threads, one at a time there.
_LLVM = threading.Lock()


def _triton_compile(program: Program, target: Target, options: dict):
    import triton
    from triton import knobs

    src = triton_source(program.kernel(), {a.name: a.type for a in program.args}, dict(program.constexprs))
    with _KNOBS, tempfile.TemporaryDirectory(prefix="monobuild-triton-") as triton_cache, \
            knobs.compilation.scope(), knobs.cache.scope():
        knobs.compilation.disable_line_info = True
        knobs.cache.dir = triton_cache  # Triton's own cache stays out: ours is content-addressed
        try:
            return triton.compile(src, target=target.gpu_target(), options=options)
        except Exception as e:  # the toolchain's errors come in many types; name the program
            raise CompileError(f"{program.name} for {target.name}: {_reason(e)}") from e


def _reason(e: Exception) -> str:
    """A toolchain error in one line: Triton's compilation errors chain one a calling function
    (the innermost says what is wrong) and each opens with the place ("at 10:4:") and the source
    around it and ends with the reason, so the innermost's two ends are kept."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"


def compile_program(program: Program, target: Target) -> CodeObject:
    options = {"num_warps": program.num_warps, "launch_pdl": program.launch_pdl,
               "launch_cooperative_grid": program.launch_cooperative}
    if program.max_registers is not None:  # its part of the SM's register file: no retry beyond it
        options["maxnreg"] = program.max_registers
    compiled = _triton_compile(program, target, options)
    if target.is_nvidia and program.launch_cooperative and program.max_registers is None:
        threads = compiled.metadata.num_warps * target.warp_size  # a warp-specialized kernel's partitions included
        res = nvidia_resources(compiled.asm["cubin"], compiled.metadata.shared, threads, target)
        if res.stack_bytes or res.spill_bytes:
            compiled = _triton_compile(program, target, {**options, "maxnreg": MAX_REGISTERS})
    md = compiled.metadata
    binary = compiled.asm["cubin" if target.is_nvidia else "hsaco"]
    threads = md.num_warps * target.warp_size
    kinds = IR_TEXTS[target.backend]
    if target.is_nvidia:
        res = nvidia_resources(binary, md.shared, threads, target)
    else:
        res = amd_resources(compiled.asm["amdgcn"], md.shared, threads, target)
    llir = compiled.asm["llir"]
    return CodeObject(
        program=program.name, target=target.name, symbol=md.name, binary=bytes(binary),
        ir=tuple((k, compiled.asm[k]) for k in kinds), shared_bytes=md.shared, num_warps=md.num_warps,
        resources=res, fingerprint=hashlib.sha256(llir.encode()).hexdigest(),
        tensor_maps=_tensor_maps(program, getattr(md, "tensordesc_meta", None)),
    )


def assemble(text: str, target: Target) -> bytes:
    """The code object that Triton's last step makes from ``text`` (PTX for sm_90, AMDGCN for
    gfx9), with the same assembler and options: a pure function of the text, so ``check``, having
    checked the IR, proves the shipped binary is that IR by assembling it again."""
    with tempfile.TemporaryDirectory(prefix="monobuild-assemble-") as tmp:
        src, out = Path(tmp) / "kernel.s", Path(tmp) / "kernel.o"
        if target.is_nvidia:
            from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

            src.write_text(text)
            done = subprocess.run([get_ptxas(target.arch).path, *PTXAS_FLAGS,
                                   f"--gpu-name={sm_arch_from_capability(target.arch)}", str(src), "-o", str(out)],
                                  capture_output=True, text=True)
            if done.returncode:
                lines = done.stderr.replace(str(src), "the PTX").strip().splitlines()
                raise CompileError(f"ptxas failed: {lines[0] if lines else done.returncode}")
        else:
            from triton._C.libtriton import amd, llvm

            try:
                with _LLVM:
                    llvm.init_targets()
                    src.write_bytes(amd.assemble_amdgcn(text, target.arch, ""))
                    amd.link_hsaco(str(src), str(out))
            except Exception as e:  # noqa: BLE001 (the assembler's errors have no type of their own)
                raise CompileError(f"the AMDGCN does not assemble: {_reason(e)}") from e
        return out.read_bytes()


def _amdgcn_from_llir(llir: str, target: Target) -> str:
    """The AMDGCN that Triton's gfx9 backend translates a program's LLVM IR to (its triple, the
    target's features, fp fusion on): the step between the IR ``check`` reads and the code object."""
    from triton._C.libtriton import amd, llvm

    with _LLVM:
        llvm.init_targets()
        return llvm.translate_to_asm(llir, amd.TARGET_TRIPLE, target.arch, "", [], True, False)


def code_from_ir(text: str, target: Target) -> tuple[bytes, str | None]:
    """The code object that a program's checked IR (``CHECKED_IR``) builds to with the compiler's
    last steps — sm_90: the PTX assembled; gfx9: the LLVM IR translated to AMDGCN, then assembled
    — and that AMDGCN (None on sm_90)."""
    if target.is_nvidia:
        return assemble(text, target), None
    amdgcn = _amdgcn_from_llir(text, target)
    return assemble(amdgcn, target), amdgcn


def _tensor_maps(program: Program, meta) -> tuple[TensorMap, ...]:
    """The descriptor arguments' boxes and swizzles, from Triton's metadata (one entry per
    descriptor argument, in order)."""
    descs = [a.name for a in program.args if a.type.startswith("tensordesc")]
    if not descs:
        return ()
    if not meta or len(meta) != len(descs):
        raise CompileError(f"{program.name}: the compiled code does not read its {len(descs)} descriptor arguments "
                           "as TMA descriptors")
    return tuple(TensorMap(name, tuple(m["block_size"]), m["swizzle"], m["elem_size"]) for name, m in zip(descs, meta))
