import sys
from pathlib import Path

# make `tests/strategies.py` importable as `strategies`
sys.path.insert(0, str(Path(__file__).parent))

try:  # one thread per test process: pytest-xdist already runs one worker per core
    import torch

    torch.set_num_threads(1)
except ImportError:  # the token-level tests need no torch
    pass
