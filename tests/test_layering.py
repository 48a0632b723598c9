"""The package's floors: data and planning load no TensorFlow; the engine's names load lazily."""

import subprocess
import sys

import pytest

import hmp


def loaded_after(statement):
    """The heavy modules in ``sys.modules`` after ``statement`` in a fresh interpreter."""
    probe = ("import sys\n%s\nprint(sorted(m for m in ('tensorflow', 'mesh_tensorflow') "
             "if m in sys.modules))" % statement)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120)
    return run.stdout.strip().splitlines()[-1]


def test_data_and_planning_load_no_tensorflow():
    assert loaded_after("import hmp.data, hmp.planning, hmp.hosts") == "[]"


def test_engine_names_load_on_first_use():
    assert loaded_after("import hmp; hmp.HeteroMeshImpl") == "['mesh_tensorflow', 'tensorflow']"


def test_engine_names_are_the_engine_modules_own():
    from hmp import lowering, mesh_impl, training
    assert hmp.HeteroMeshImpl is mesh_impl.HeteroMeshImpl
    assert hmp.HeteroLowering is lowering.HeteroLowering
    assert hmp.train_step is training.train_step
    assert hmp.layers is sys.modules["hmp.layers"]
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        hmp.nonsense  # noqa: B018
