"""The package's floors: data and planning load no TensorFlow, nor do a run's settings, the
values a graph is built from, the names of a run's files and the model registry; the engine's names load lazily; the
library never imports the application's model registry; only the programs define flags;
measuring the devices uses the graph room and nothing of the run."""

import ast
import pathlib
import subprocess
import sys

import pytest

from cli_batch import HUNG_S

import hmp

FLOORS = "import hmp.data, hmp.planning, hmp.hosts, hmp.layer_math"
# what the application and a run's settings use before any graph is built; what scripts
# read a run's results with
VALUES = "import hmp.graph.graph_config, hmp.run.settings, hmp.run.run_files, models"
FIRST_USE = "import hmp; hmp.HeteroMeshImpl"
STATEMENTS = (FLOORS, VALUES, FIRST_USE)


@pytest.fixture(scope="module")
def loaded():
    """{statement: the heavy modules in ``sys.modules`` after it}, the statements run in
    this order in one fresh interpreter (the first loads nothing heavy)."""
    probe = "import sys\n" + "".join(
        "%s\nprint(sorted(m for m in ('tensorflow', 'mesh_tensorflow') if m in sys.modules))\n"
        % statement for statement in STATEMENTS)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=HUNG_S)
    return dict(zip(STATEMENTS, run.stdout.strip().splitlines()[-len(STATEMENTS):]))


def test_data_and_planning_load_no_tensorflow(loaded):
    assert loaded[FLOORS] == "[]"


def test_settings_graph_values_and_model_registry_load_no_tensorflow(loaded):
    """The model registry (``models``), the settings and the programs' flags take the
    model's config, precisions, placement and recipe from ``hmp.graph.graph_config``."""
    assert loaded[VALUES] == "[]"


def test_engine_names_load_on_first_use(loaded):
    assert loaded[FIRST_USE] == "['mesh_tensorflow', 'tensorflow']"


def test_the_library_imports_no_model_registry():
    """``models`` is the application's: the library gets a model from its caller
    (``ModelConfig.model``), so no module under hmp/ imports it."""
    library = pathlib.Path(hmp.__file__).parent
    importers = []
    for path in sorted(library.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name == "models" or name.startswith("models.") for name in names):
                importers.append(str(path.relative_to(library)))
    assert importers == ["predict.py", "selfcheck.py", "train.py"]   # the command lines


def test_engine_names_are_the_engine_modules_own():
    from hmp.mesh import lowering, mesh_impl, train_step
    assert hmp.HeteroMeshImpl is mesh_impl.HeteroMeshImpl
    assert hmp.HeteroLowering is lowering.HeteroLowering
    assert hmp.train_step is train_step.train_step
    assert hmp.layers is sys.modules["hmp.layers"]
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        hmp.nonsense  # noqa: B018


# The house (docs/architecture.md): a module may import its own room and rooms on
# lower floors, never a higher one.
FLOOR_OF_ROOM = {
    "hmp.compat": 0, "hmp.errors": 0, "hmp.files": 0, "hmp.layer_math": 0, "hmp.hosts": 0,
    "hmp.cli": 0, "hmp.checklist": 0, "hmp.formatting": 0, "hmp.device_names": 0,
    "hmp.data": 1, "hmp.evaluation": 1,
    "hmp.mesh": 2, "hmp.cluster": 2,
    "hmp.layers": 3, "hmp.planning": 3,
    "hmp.graph": 4,
    "hmp.run": 5, "hmp.measure": 5,
    "hmp.train": 6, "hmp.predict": 6, "hmp.worker": 6, "hmp.selfcheck": 6,
    "hmp.scene_flags": 6,
}
PROGRAMS = 6


def test_only_the_programs_define_flags():
    """absl's flags at the program's edge: a module below the programs' floor takes its
    values as arguments (a settings object), never from a flag it defines; but for a
    command of its own (``python -m hmp.data.download``), whose flags are its own."""
    library = pathlib.Path(hmp.__file__).parent
    defining = []
    for path in sorted(library.rglob("*.py")):
        module = "hmp." + ".".join(path.relative_to(library).with_suffix("").parts)
        room, source = _room(module), path.read_text()
        if (room is not None and FLOOR_OF_ROOM[room] == PROGRAMS
                or 'if __name__ == "__main__":' in source):
            continue
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("DEFINE")):
                defining.append("%s:%d" % (module, node.lineno))
    assert defining == []


def _room(module):
    """'hmp.graph.graph' -> 'hmp.graph'; 'hmp.layers' -> 'hmp.layers'; 'hmp' -> None."""
    parts = module.split(".")
    for length in (2, 1):
        if ".".join(parts[:length]) in FLOOR_OF_ROOM:
            return ".".join(parts[:length])
    return None


def _imports(path):
    """The hmp modules (or names of packages) a file imports at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module] + ["%s.%s" % (node.module, a.name) for a in node.names]
    return [name for name in found if name.startswith("hmp.")]


def test_every_room_has_a_floor_and_no_import_runs_up():
    library = pathlib.Path(hmp.__file__).parent
    upward, homeless = [], []
    for path in sorted(library.rglob("*.py")):
        parts = path.relative_to(library.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module == "hmp":
            continue   # the package's lazy face names engine modules as strings only
        room = _room(module)
        if room is None:
            homeless.append(module)
            continue
        for name in _imports(path):
            target = _room(name)
            if target is not None and FLOOR_OF_ROOM[target] > FLOOR_OF_ROOM[room]:
                upward.append("%s -> %s" % (module, name))
    assert homeless == []
    assert upward == []


# The one rule beside the floors: hmp.measure and hmp.run share a floor, and only the run
# imports the other (it plans with the measured speeds). hmp.measure times the model's own
# training step, which it builds with the graph room below them both.
def test_measuring_builds_its_step_in_the_graph_room_and_uses_nothing_of_the_run():
    room = pathlib.Path(hmp.__file__).parent / "measure"
    used = {name for path in room.glob("*.py") for name in _imports(path)}
    assert {name for name in used if _room(name) == "hmp.graph"}   # it does build the step
    assert sorted(name for name in used if _room(name) == "hmp.run") == []
