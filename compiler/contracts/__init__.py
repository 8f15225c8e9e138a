"""``monobuild check``: the memory-model contracts of a package, verified offline on CPU.

Plan contracts (plan_rules.py) read the manifest: C1 happens-before, C2 no overwrite in flight,
C3 residency, C4 liveness, C5 epochs. IR contracts read the emitted code: PTX on sm_90
(nvidia.py), LLVM IR through llvmlite on gfx9 (amd.py): I1 release signals after a CTA barrier,
I2 acquire waits in loops, I3 coherent loads of cross-CTA regions, I4 exactly the declared sites.
docs/contracts.md states each contract, how it is checked, and what it cannot see.
"""
