"""rekall as an installed wheel has it, for benchmarks that start fresh interpreters.

pip compiles a wheel's modules when it installs them. A checkout run under
``PYTHONDONTWRITEBYTECODE`` never writes bytecode, so every process a benchmark starts (a worker,
``rekall status``, the hook) would compile each module it imports, a cost no user pays.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rekall"


def compile_rekall() -> None:
    """Write the bytecode of every rekall module (``compileall`` writes it whatever the environment says)."""
    compileall.compile_dir(PACKAGE, quiet=1)
