"""model_spec: LayerSpecs read off the models' graphs, against hand-computed figures."""

import dataclasses
import types

import pytest

from hmp.errors import InvalidInput
from hmp.graph.from_graph import model_spec
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.planning import Plan, plan_layout
from models import model_config

CPUS = ["/cpu:0", "/cpu:1", "/cpu:2"]


def test_cnn2d_layers_match_hand_computed_figures():
    # patch 7, 5 bands, width 4: filters1 = filters2 = 8, channels = 4, hidden = 16.
    # A conv's params include its batch norm's scale and offset (2 per output channel).
    spec = model_spec(model_config("cnn2d", patch=7, bands=5, n_classes=3, width=4))
    expected = [
        # name, kind, split dim, size, role, FLOPs, params, outputs (per sample)
        ("block1/split_out", "conv2d", "filters1", 8, "output",
         2 * 7 * 7 * (3 * 3 * 5) * 8, 3 * 3 * 5 * 8 + 8 + 2 * 8, 7 * 7 * 8),
        ("block1/split_in", "conv2d", "filters1", 8, "input",
         2 * 7 * 7 * (3 * 3 * 8) * 4, 3 * 3 * 8 * 4 + 4 + 2 * 4, 7 * 7 * 4),
        # 2x2 SAME pool, stride 2: 7x7 -> 4x4; one FLOP per window element per output.
        ("max_pool", "pool", None, 0, None, 4 * (4 * 4 * 4), 0, 4 * 4 * 4),
        ("block2/split_out", "conv2d", "filters2", 8, "output",
         2 * 4 * 4 * (3 * 3 * 4) * 8, 3 * 3 * 4 * 8 + 8 + 2 * 8, 4 * 4 * 8),
        ("block2/split_in", "conv2d", "filters2", 8, "input",
         2 * 4 * 4 * (3 * 3 * 8) * 4, 3 * 3 * 8 * 4 + 4 + 2 * 4, 4 * 4 * 4),
        ("hidden", "dense", "hidden", 16, "output", 2 * (4 * 4 * 4) * 16, 64 * 16 + 16, 16),
        ("logits", "dense", "hidden", 16, "input", 2 * 16 * 3, 16 * 3 + 3, 3),
    ]
    got = [(l.name, l.kind, l.split_dim, l.split_size, l.split_role, l.flops_per_sample,
            l.params, l.output_elems_per_sample) for l in spec.layers]
    assert got == expected
    assert spec.norm_layers == 4   # a batch norm after each of the four convolutions
    assert spec.input_shape == (7, 7, 5)
    assert spec.name == "cnn2d(width=4, input=7x7x5, classes=3)"


def test_local_batch_statistics_make_no_norm_layers_to_price():
    """The same layers, none of whose batch norms all-reduce (``hmp.layers.batch_norm``)."""
    sync, local = (model_spec(model_config("cnn2d", 7, 5, 3, 4, batch_norm=mode))
                   for mode in ("sync", "local"))
    assert (sync.norm_layers, local.norm_layers) == (4, 0)
    # counted apart: each replica of a batch split needs samples of its own
    assert (sync.replica_norm_layers, local.replica_norm_layers) == (0, 4)
    assert local.layers == sync.layers


def test_hybrid_conv2d_contracts_spectrum_and_filters():
    # patch 5, 8 bands, width 8: conv3d_1 (7,3,3) -> 8 filters on an 8x5x5 volume,
    # conv3d_2 (5,3,3) stride 2 -> spectrum 4 x 16 channels, conv2d contracts both.
    layers = {l.name: l for l in model_spec(model_config("hybrid", 5, 8, 4, width=8)).layers}
    assert layers["conv3d_1"].flops_per_sample == 2 * (8 * 5 * 5 * 8) * (7 * 3 * 3)
    assert layers["conv3d_2"].flops_per_sample == 2 * (4 * 5 * 5 * 16) * (5 * 3 * 3 * 8)
    assert layers["conv2d"].flops_per_sample == 2 * (5 * 5 * 64) * (3 * 3 * 4 * 16)
    assert (layers["conv2d"].split_dim, layers["conv2d"].split_role) == ("filters2", "output")
    assert (layers["hidden"].split_dim, layers["hidden"].split_role) == ("filters2", "input")
    assert layers["logits"].split_dim is None


def test_default_width_is_the_models():
    assert model_spec(model_config("spectral", 3, 4, 2)).split_dims() == {"hidden": 128}


@pytest.mark.parametrize("name", ["cnn2d", "cnn3d", "hybrid", "spectral"])
def test_a_plan_of_the_spec_lowers_on_the_model(name):
    config = model_config(name, patch=5, bands=32, n_classes=3, width=4)
    spec = model_spec(config)
    plan = plan_layout(spec, CPUS, [7, 4, 1], 12, "model:3")
    graph = TrainingGraph(config, Placement.from_plan(plan), 12, (4, 4))  # lowering checks every split
    assert dict(graph.mesh_impl.splits) == {k: tuple(v) for k, v in plan.splits.items()}


def test_a_plan_for_another_input_is_refused(tmp_path):
    config = model_config("cnn2d", patch=5, bands=6, n_classes=3, width=4)
    plan = plan_layout(model_spec(config), CPUS, [7, 4, 1], 12, "model:3")
    plan.to_json(tmp_path / "plan.json")
    Plan.from_json(tmp_path / "plan.json", model_spec=model_spec(config))
    other = model_config("cnn2d", patch=5, bands=7, n_classes=3, width=4)
    with pytest.raises(ValueError, match="input=5x5x7"):
        Plan.from_json(tmp_path / "plan.json", model_spec=model_spec(other))


def _with_split_dims(name, split_dims):
    """``model_config(name, ...)`` of a model that is that built-in one but for its
    SPLIT_DIMS (a custom model's module, as the application's lookup gives it)."""
    config = model_config(name, patch=5, bands=6, n_classes=3, width=4)
    model = types.SimpleNamespace(logits=config.model.logits, SPLIT_DIMS=split_dims)
    return dataclasses.replace(config, model=model)


def test_split_dims_that_name_no_layers_dim_are_refused_naming_those_it_could_split():
    """A misspelt name would split nothing: with --mesh=model:2 each device would compute
    the whole model. The model's output (classes) is not offered."""
    with pytest.raises(InvalidInput) as refused:
        model_spec(_with_split_dims("cnn2d", ("filter1", "filters2", "hiden")))
    assert str(refused.value) == (
        "SPLIT_DIMS ('filter1', 'filters2', 'hiden'): 'filter1', 'hiden' are no dim of the "
        "model's layers; the dims it could split are filters1, channels1, filters2, "
        "channels2, hidden")
    # ("hidden") is a string, not a tuple: one name, not its letters ("h" is a dim too)
    spec = model_spec(_with_split_dims("spectral", "hidden"))
    assert spec.split_dims() == {"hidden": 8}
    assert model_spec(_with_split_dims("spectral", ())).split_dims() == {}
