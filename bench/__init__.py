"""``monobuild bench`` and what it shares with the GPU tests: random cases, the PyTorch baseline."""
