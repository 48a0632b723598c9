"""Per-device workload of lowered graphs: exact shares, replicated work, slice bytes."""

import functools

import pytest

from hmp.graph.from_graph import model_spec
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.graph.workload import workload
from models import model_config

# patch 7, 5 bands, 3 classes, width 6: filters1 = filters2 = 12, channels 6, hidden 24.
CONFIG = model_config("cnn2d", patch=7, bands=5, n_classes=3, width=6)
BATCH = 12
CPUS = ("/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3")
ALL_SPLIT = "filters1:model;filters2:model;hidden:model"
LAYOUTS = {
    "model": Placement("model:3", ALL_SPLIT, CPUS[:3],
                    {"filters1": [7, 4, 1], "filters2": [7, 4, 1], "hidden": [14, 8, 2]}),
    "batch": Placement("batch:2", "batch:batch", CPUS[:2], {"batch": [8, 4]}),
    "hybrid": Placement("batch:2;model:2", "batch:batch;" + ALL_SPLIT, CPUS,
                     {"batch": [7, 5], "filters1": [9, 3], "filters2": [9, 3], "hidden": [18, 6]}),
}

# Forward FLOPs of the whole model for one sample, by hand (see test_from_graph).
HAND_FLOPS = {
    "block1/split_out": 2 * 49 * (9 * 5) * 12,
    "block1/split_in": 2 * 49 * (9 * 12) * 6,
    "max_pool": 4 * (16 * 6),
    "block2/split_out": 2 * 16 * (9 * 6) * 12,
    "block2/split_in": 2 * 16 * (9 * 12) * 6,
    "hidden": 2 * (16 * 6) * 24,
    "logits": 2 * 24 * 3,
}
SPLIT_DIM = {"block1/split_out": "filters1", "block1/split_in": "filters1",
             "block2/split_out": "filters2", "block2/split_in": "filters2",
             "hidden": "hidden", "logits": "hidden"}


@functools.lru_cache(maxsize=None)
def lowered_workload(name):
    """The workload of the model lowered on ``LAYOUTS[name]`` (momentum: one slot)."""
    graph = TrainingGraph(CONFIG, LAYOUTS[name], BATCH, (4, 4), optimizer="momentum")
    return workload(graph.lowering, graph.mesh_impl)


def test_model_split_shares_are_exact_and_replicated_work_is_counted():
    work = lowered_workload("model")
    assert [l.name for l in work.layers] == list(HAND_FLOPS)
    for layer in work.layers:
        assert layer.whole == BATCH * HAND_FLOPS[layer.name]
        if layer.name in SPLIT_DIM:
            shares = LAYOUTS["model"].splits[SPLIT_DIM[layer.name]]
            # Integer-exact: flops[i] / whole == shares[i] / sum(shares).
            assert [f * sum(shares) for f in layer.flops] == [layer.whole * s for s in shares]
            assert layer.replicas == 1
        else:  # the pool runs on the replicated channels: every device pools all of them
            assert layer.flops == (layer.whole,) * 3 and layer.replicas == 3
        assert sum(layer.flops) == layer.whole * layer.replicas
    # Device 2 (1 filter of 12, 2 hidden of 24), by hand, plus the replicated pool.
    assert work.device_flops()[2] == BATCH * (
        2 * 49 * 45 * 1 + 2 * 49 * 9 * 1 * 6 + 4 * 96 + 2 * 16 * 54 * 1 + 2 * 16 * 9 * 1 * 6
        + 2 * 96 * 2 + 2 * 2 * 3)


def test_model_split_parameter_bytes_are_the_slices():
    work = lowered_workload("model")
    def norms(f1, f2):  # batch norm values per channel after each conv (2 of each kind)
        return 2 * (f1 + 6 + f2 + 6)

    def params(f1, f2, hid):  # kernels + biases + batch-norm scales and offsets
        return (9 * 5 * f1 + f1) + (9 * f1 * 6 + 6) + (9 * 6 * f2 + f2) + (9 * f2 * 6 + 6) \
            + (96 * hid + hid) + (hid * 3 + 3) + norms(f1, f2)
    shares = [(7, 7, 14), (4, 4, 8), (1, 1, 2)]
    assert work.param_bytes == tuple(4 * params(*s) for s in shares)
    # Momentum keeps one slot per weight, batch norm a moving mean and variance per channel.
    assert work.variable_bytes == tuple(2 * 4 * params(*s) + 4 * norms(*s[:2]) for s in shares)


@pytest.mark.parametrize("name", ["batch", "hybrid"])
def test_batch_split_shares_are_exact(name):
    layout = LAYOUTS[name]
    work = lowered_workload(name)
    rows = layout.splits["batch"]
    columns = len(layout.devices) // len(rows)
    for layer in work.layers:
        # The pool runs on replicated channels: every model column pools them all.
        filters = layout.splits.get(SPLIT_DIM.get(layer.name), [1] * columns)
        for pnum, flops in enumerate(layer.flops):
            row, column = divmod(pnum, columns)
            part, of = (1, 1) if layer.name == "max_pool" else (filters[column], sum(filters))
            # Integer-exact: flops / whole == rows[row] / BATCH * part / of.
            assert flops * BATCH * of == layer.whole * rows[row] * part
        assert sum(layer.flops) == layer.whole * layer.replicas
        assert layer.replicas == (columns if layer.name == "max_pool" else 1)


def test_totals_equal_the_unsplit_model_spec():
    work = lowered_workload("hybrid")
    spec = model_spec(CONFIG)
    assert sum(l.whole for l in work.layers) == BATCH * sum(l.flops_per_sample
                                                            for l in spec.layers)
    replicated = sum(l.whole * (l.replicas - 1) for l in work.layers)
    assert sum(work.device_flops()) == sum(l.whole for l in work.layers) + replicated
