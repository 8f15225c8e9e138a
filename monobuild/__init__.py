"""monobuild: per-layer persistent decode kernels, compiled ahead of time.

Subpackages: ``compiler`` (recipe → plan → programs → code objects → package), ``runtime``
(load a package and run the decode step: torch and the vendor driver only), ``cli`` (the
``monobuild`` command). ``recipes`` and ``schedules`` are data the package ships.
"""

__version__ = "0.1.0"
