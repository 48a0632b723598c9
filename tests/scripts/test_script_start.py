"""Every program of scripts/ loads TensorFlow quietly: its C++ start-up lines ("oneDNN
custom operations are on", ...) would bury the program's own lines and its one-line
errors (``hmp.cli.import_tensorflow_quietly``, called before anything imports it). Seen
here: what a program imports before its --help ends it, i.e. at its start (an import
within its main is not run)."""

import json
import subprocess
import sys

from cli_batch import HUNG_S, REPO
from script_modules import SCRIPTS

# In one child: each program started with --help, TensorFlow's import stopped where it
# begins; "quiet" if hmp.cli.import_tensorflow_quietly imports it, "loud" if anything else
# does first, "none" if the program ends (its help) without importing it.
WATCH = '''
import inspect, json, runpy, sys

class Stop(Exception):
    pass

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            callers = {frame.function for frame in inspect.stack()}
            raise Stop("quiet" if "import_tensorflow_quietly" in callers else "loud")
        return None

sys.meta_path.insert(0, Watch())
sys.path.insert(0, sys.argv[1])
found = {}
scripts = sys.argv[2:]
for script in scripts:
    from absl import flags   # the flags of the scripts before: each defines its own
    for name in [name for name in flags.FLAGS
                 if flags.FLAGS.find_module_defining_flag(name) in scripts]:
        delattr(flags.FLAGS, name)
    sys.argv = [script, "--help"]
    sys.path.insert(0, sys.argv[0].rpartition("/")[0])
    try:
        runpy.run_path(script, run_name="__main__")
        found[script] = "none"
    except Stop as stop:
        found[script] = str(stop)
    except SystemExit:
        found[script] = "none"
print(json.dumps(found))
'''


def test_every_script_imports_tensorflow_quietly_or_not_before_its_help():
    scripts = sorted(str(path) for path in SCRIPTS.glob("*.py")
                     if 'if __name__ == "__main__":' in path.read_text())
    assert len(scripts) >= 15
    child = subprocess.run([sys.executable, "-c", WATCH, str(REPO), *scripts],
                           capture_output=True, text=True, timeout=HUNG_S, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    found = json.loads(child.stdout.splitlines()[-1])
    assert set(found) == set(scripts)
    assert {script: how for script, how in found.items() if how == "loud"} == {}
    assert found[str(SCRIPTS / "bench_hetero.py")] == "quiet"   # the watch sees a quiet one
