"""The programs of scripts/ as modules, for tests of their functions.

A script imports its siblings (``plain_tf_models``) as top-level
modules, which ``python scripts/x.py`` allows because Python puts the script's
folder first on ``sys.path``. ``import_script`` does the same, only while it
imports the script.
"""

import importlib
import pathlib
import sys

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def import_script(name):
    """scripts/<name>.py, imported as the module ``name`` (once)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))
