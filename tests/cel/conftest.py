from __future__ import annotations

import sys
from pathlib import Path

# Test modules import their shared helpers (conformance_tables) by name; import mode is importlib.
sys.path.insert(0, str(Path(__file__).parent))
