import sys
from pathlib import Path

# make `tests/strategies.py` importable as `strategies`
sys.path.insert(0, str(Path(__file__).parent))
