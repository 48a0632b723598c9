"""The package's floors: data and planning load no TensorFlow, nor do a run's settings, the
values a graph is built from and the model registry; the engine's names load lazily; the
library never imports the application's model registry."""

import ast
import pathlib
import subprocess
import sys

import pytest

import hmp

FLOORS = "import hmp.data, hmp.planning, hmp.hosts, hmp.layer_math"
# what the application and a run's settings use before any graph is built
VALUES = "import hmp.run.graph_config, hmp.run.settings, models"
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
                         check=True, timeout=120)
    return dict(zip(STATEMENTS, run.stdout.strip().splitlines()[-len(STATEMENTS):]))


def test_data_and_planning_load_no_tensorflow(loaded):
    assert loaded[FLOORS] == "[]"


def test_settings_graph_values_and_model_registry_load_no_tensorflow(loaded):
    """The model registry (``models``), the settings and the programs' flags take the
    model's config, precisions, placement and recipe from ``hmp.run.graph_config``."""
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
    "hmp.cli": 0, "hmp.checklist": 0,
    "hmp.data": 1, "hmp.evaluation": 1,
    "hmp.mesh": 2, "hmp.cluster": 2,
    "hmp.layers": 3, "hmp.planning": 3,
    "hmp.run": 4, "hmp.measure": 4,
    "hmp.train": 5, "hmp.predict": 5, "hmp.worker": 5, "hmp.selfcheck": 5,
}


def _room(module):
    """'hmp.run.graph' -> 'hmp.run'; 'hmp.layers' -> 'hmp.layers'; 'hmp' -> None."""
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


# The one import beside the floors: hmp.measure times the model's own training step, so it
# uses the run's graph builder and its values, and nothing else of hmp.run (which uses
# hmp.measure).
MEASURE_USES_OF_RUN = {"hmp.run.from_graph", "hmp.run.graph", "hmp.run.graph_config"}


def test_measuring_uses_only_the_graph_builder_of_the_run():
    room = pathlib.Path(hmp.__file__).parent / "measure"
    used = {name for path in room.glob("*.py") for name in _imports(path)
            if name.startswith("hmp.run.")}
    assert used   # it does build the step
    assert {".".join(name.split(".")[:3]) for name in used} <= MEASURE_USES_OF_RUN
