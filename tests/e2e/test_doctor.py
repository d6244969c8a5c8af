"""``warptd doctor`` (issue 33): on the node it runs on, is warptd right, and what does it cost? Over the
C NVML double under the real nvidia-ml-py: a GPU answering as the real H200 did (its driver, its
missing NVLinks and engine counts, the CPU it charged per call), and the host CPU alone."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_python


@pytest.mark.slow
def test_the_doctor_loads_neither_torch_nor_plotting_nor_the_daemon(tmp_path):
    argv = ["warptd", "doctor", "--quick", "--json", "--backend", "cpu", "--sysfs", str(tmp_path)]
    code = (
        "import runpy, sys\n"
        f"sys.argv = {[*argv, '--procfs', str(tmp_path)]!r}\n"
        "try:\n"
        "    runpy.run_module('warptd', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = ('torch', 'plotly', 'matplotlib', 'warptd.daemon', 'warptd.http')\n"
        "print('LOADED=' + ','.join(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout[: result.stdout.rindex("LOADED=")])
    assert report["backends"][0]["backend"] == "cpu"
    assert result.stdout.rstrip().endswith("LOADED=")
