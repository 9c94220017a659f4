"""Finds a Python interpreter that can import torch, for the tests that run real PyTorch scripts.

The python3 first on PATH may be a pyenv or venv shim without torch (Debian's python3-torch is installed for
/usr/bin/python3): try PYTHON_EXEC, then /usr/bin/python3, then python3 from PATH.

TorchStragglerCase runs real gloo ranks (py/gloo_steps.py, SCRIPT) with that interpreter, for
test_straggler_torch.py and test_straggler_balanced.py."""
import functools
import os
import shutil
import subprocess

from harness import DdprunTestCase

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../examples/python"))
HELPERS = os.path.abspath(os.path.join(os.path.dirname(__file__), "../integration/py"))
PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../python"))
SCRIPT = os.path.join(HELPERS, "gloo_steps.py")


@functools.lru_cache(maxsize=None)
def torch_python():
    """The interpreter's path, or None when none can import torch."""
    for candidate in (os.environ.get("PYTHON_EXEC"), "/usr/bin/python3", shutil.which("python3")):
        if not candidate or not os.path.exists(candidate):
            continue
        try:
            ok = subprocess.run([candidate, "-c", "import torch.distributed"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=120).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if ok:
            return candidate
    return None


NO_TORCH = "no Python interpreter here imports torch (tried PYTHON_EXEC, /usr/bin/python3, python3 on PATH): " \
           "install Debian's python3-torch (scripts/setup)"


class TorchStragglerCase(DdprunTestCase):
    """Skips without torch; workers run under torch_python(), with python/ (ddprun's helpers) on PYTHONPATH."""

    def setUp(self):
        super().setUp()
        if torch_python() is None:
            self.skipTest(NO_TORCH)
        self.env["PYTHON_EXEC"] = torch_python()
        self.env["PYTHONPATH"] = PYTHON_DIR + (":" + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
