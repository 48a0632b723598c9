"""The programs of scripts/ as modules, for tests of their functions.

A script imports its siblings (``plain_tf_models``) as top-level
modules, which ``python scripts/x.py`` allows because Python puts the script's
folder first on ``sys.path``. ``import_script`` does the same, only while it
imports the script.
"""

import importlib
import json
import pathlib
import subprocess
import sys

from cli_batch import HUNG_S

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def import_script(name):
    """scripts/<name>.py, imported as the module ``name`` (once)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


def json_of_child(code):
    """The JSON that ``code`` prints as its last line, run in a fresh interpreter with
    scripts/ first on its path: for a script whose flags the test session's would clash
    with (hmp.train's --epochs, hmp.scene_flags' --train_fraction)."""
    child = subprocess.run([sys.executable, "-c", "import sys\nsys.path.insert(0, %r)\n%s"
                            % (str(SCRIPTS), code)], capture_output=True, text=True,
                           timeout=HUNG_S, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout.splitlines()[-1])
