"""One AMD GPU's metrics table, kept by its device object (warptd/backends/amd/metrics_table.py), and
the AMD package's place below sampling."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_amd_backend_imports_nothing_of_sampling():
    """Backends sit below warptd.sampling: the backend, loaded alone, brings none of it along."""
    code = (
        "import sys\n"
        "import warptd.backends.amd.backend\n"
        "print(sorted(m for m in sys.modules if m.startswith('warptd.sampling')))\n"
    )
    run = [sys.executable, "-c", code]
    result = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
