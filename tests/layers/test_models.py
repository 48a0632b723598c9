"""Every model builds from hmp.layers, plans, and computes on a planned uneven
2x2 mesh exactly what it computes on one device."""

import numpy as np
import pytest

import harness
import models
from hmp.graph.from_graph import model_spec
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.measure.speeds import random_batch
from hmp.planning import plan_layout

DEVICES = ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
SESSION = harness.session_config()
BATCH = 16


def first_two_losses(config, layout):
    batch = random_batch(config, BATCH)
    graph = TrainingGraph(config, layout, BATCH, batch.image_shape, "sgd", 0.05, seed=5)
    feed = batch.feed(graph)
    with graph.session(batch.padded_cube, SESSION) as session:
        first, _ = session.run([graph.loss, graph.train_op], feed)
        # the loss after one update, fetched with the update as the first: the same
        # fetches run the same pruned graph, which TensorFlow's graph rewrites optimise
        # once (a loss alone is another graph, rewritten again: 0.2-2 s a model). The
        # loss is read before the update it feeds, so it is the same value bit for bit.
        second, _ = session.run([graph.loss, graph.train_op], feed)
    return np.array([first, second])


# Tiny widths keep the new models' tests short; HybridSN's VALID convolutions need 9x9.
SHAPES = {"hybridsn": dict(patch=9, bands=16, width=2), "ssrn": dict(patch=3, bands=9, width=2)}


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_model_on_planned_uneven_mesh_matches_one_device(name):
    """With batch norm and dropout (drawn whole, sliced per device) in training mode."""
    config = models.model_config(name, n_classes=5,
                                 **SHAPES.get(name, dict(patch=7, bands=30)))
    plan = plan_layout(model_spec(config), DEVICES, [3, 1, 2, 1], BATCH, "batch:2;model:2")
    assert set(plan.splits) == set(models.get_model(name).SPLIT_DIMS) | {"batch"}
    assert any(len(set(sizes)) > 1 for sizes in plan.splits.values())   # really uneven
    expected = first_two_losses(config, Placement())
    actual = first_two_losses(config, Placement.from_plan(plan))
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_too_small_input_names_layer_and_dimension():
    config = models.model_config("cnn3d", patch=7, bands=12, n_classes=5)
    with pytest.raises(ValueError, match=r"conv2/conv: dimension 'bands' has size 1, "
                                         r"smaller than the VALID window 3"):
        first_two_losses(config, Placement())


def test_recipe_is_a_copy_of_the_models_own_defaults():
    hybridsn = models.get_model("hybridsn")
    own = models.recipe("hybridsn")
    assert own == hybridsn.RECIPE and own is not hybridsn.RECIPE
    assert models.recipe("cnn2d") == {}   # no RECIPE: every flag keeps its own default
