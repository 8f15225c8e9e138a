"""Ops: each step of a program as one frozen spec (``spec.py``), and the op lists of the programs
a dense model runs (``dense.py``: the decoder layer; ``head.py``: the embedding and the head)."""
