"""Per split dim, split or replicate: the planner's choice against every choice priced."""

import itertools

import pytest

from hmp.planning import (DeviceSpec, LinkSpec, ModelSpec, Plan, apportion, conv_layer_spec,
                          dense_layer_spec, parse_mesh, plan_layout, pool_layer_spec, predict)
from hmp.run.rebalance import replan


def three_dim_model():
    """A wide conv pair (filters1: 48), a narrow one on the same 9x9 maps (filters2: 4)
    and a split classifier input (hidden: 32)."""
    return ModelSpec("three", [
        conv_layer_spec("conv1", "conv2d", (9, 9), 3, 8, 48, split_dim="filters1",
                        split_role="output"),
        conv_layer_spec("conv2", "conv2d", (9, 9), 3, 48, 16, split_dim="filters1",
                        split_role="input"),
        conv_layer_spec("conv3", "conv2d", (9, 9), 3, 16, 4, split_dim="filters2",
                        split_role="output"),
        conv_layer_spec("conv4", "conv2d", (9, 9), 1, 4, 16, split_dim="filters2",
                        split_role="input"),
        pool_layer_spec("pool", (9, 9), 16, 3),
        dense_layer_spec("fc1", 9 * 16, 32, split_dim="hidden", split_role="output"),
        dense_layer_spec("fc2", 32, 10, split_dim="hidden", split_role="input"),
    ], (9, 9, 8))


HOSTS = {"model:2": ["a", "b"], "batch:2;model:2": ["a", "b", "a", "b"]}
RATES = {"model:2": [3e10, 1e10], "batch:2;model:2": [3e10, 1e10, 3e10, 1e10]}
BATCH = 64


def devices(mesh):
    return [DeviceSpec(f"/job:w/task:{i}/device:CPU:0", rate, host=host)
            for i, (rate, host) in enumerate(zip(RATES[mesh], HOSTS[mesh]))]


def brute_force(spec, mesh, link):
    """Every choice of replicated dims (all but one at most) priced by predict with
    speed-proportional splits: {dims: step}."""
    m = parse_mesh(mesh)
    specs = devices(mesh)
    rates = [[d.flops_per_s for d in specs[r * m.model:(r + 1) * m.model]]
             for r in range(m.batch)]
    columns = [sum(row[c] for row in rates) for c in range(m.model)]
    steps = {}
    names = list(spec.split_dims())
    for count in range(len(names)):
        for dims in itertools.combinations(names, count):
            view = spec.replicating(dims)
            splits = {d: apportion(size, columns) for d, size in view.split_dims().items()}
            if "batch" in m.axes:
                splits["batch"] = apportion(BATCH, [sum(row) for row in rates])
            steps[dims] = predict(view, specs, m, BATCH, splits, link).step
    return steps


LINKS = [LinkSpec(5e10, 1e-7),                                  # fast: split everything
         LinkSpec(2e9, 2e-5, loaded=LinkSpec(1e9, 5e-5)),       # some dims replicated
         LinkSpec(1e8, 1e-3, local=LinkSpec(1e11, 1e-7))]       # slow between hosts


@pytest.fixture(scope="module")
def choices():
    """{(mesh, link index): (plan, brute-force steps)}."""
    spec = three_dim_model()
    return {(mesh, i): (plan_layout(spec, devices(mesh), None, BATCH, mesh, link=link),
                        brute_force(spec, mesh, link))
            for mesh in HOSTS for i, link in enumerate(LINKS)}


@pytest.mark.parametrize("mesh", sorted(HOSTS))
@pytest.mark.parametrize("link", range(len(LINKS)))
def test_planner_picks_the_fastest_of_every_choice(choices, mesh, link):
    plan, steps = choices[mesh, link]
    best = min(steps, key=lambda dims: (steps[dims], len(dims)))
    assert set(plan.replicated_dims()) == set(best)
    assert plan.prediction.step == pytest.approx(steps[best])
    assert plan.layout_rules.split(";") == [
        f"{d}:{'model'}" for d in ("filters1", "filters2", "hidden") if d not in best
    ] + (["batch:batch"] if "batch" in mesh else [])
    assert sorted(plan.splits) == sorted(
        [d for d in ("filters1", "filters2", "hidden") if d not in best]
        + (["batch"] if "batch" in mesh else []))
    for record in plan.replicated:   # saved: every dim split against this one replicated
        assert record["saved_s"] == pytest.approx(steps[()] - steps[(record["dim"],)])
        assert record["saved_s"] > 0 and record["dim"] in record["reason"]


def test_the_cases_cover_split_all_and_replicate_some(choices):
    replicated = {key: tuple(plan.replicated_dims()) for key, (plan, _) in choices.items()}
    assert replicated["model:2", 0] == () and replicated["batch:2;model:2", 0] == ()
    assert any(len(dims) == 1 for dims in replicated.values())
    assert any(len(dims) == 2 for dims in replicated.values())


def test_without_a_link_every_dim_is_split():
    plan = plan_layout(three_dim_model(), devices("model:2"), None, BATCH, "model:2")
    assert plan.replicated == [] and sorted(plan.splits) == ["filters1", "filters2", "hidden"]


def test_given_replicated_dims_round_trip_through_json_and_rebalance(tmp_path):
    spec = three_dim_model()
    plan = plan_layout(spec, ["/cpu:0", "/cpu:1"], [3, 1], BATCH, "model:2",
                       replicated=("filters2",))
    assert plan.layout_rules == "filters1:model;hidden:model"
    assert plan.splits == {"filters1": [36, 12], "hidden": [24, 8]}
    assert plan.replicated == [{"dim": "filters2", "saved_s": None,
                                "reason": "filters2 replicated: given by the caller"}]
    assert "filters2 replicated" in plan.explain()
    path = tmp_path / "plan.json"
    plan.to_json(path)
    assert Plan.from_json(path, spec).replicated == plan.replicated
    # Re-balancing (device 1 busy 3 times as long as device 0) keeps filters2 replicated.
    moved = replan(plan, spec, [1.0, 3.0])
    speeds = [plan.prediction.load[0] / 1.0, plan.prediction.load[1] / 3.0]
    assert moved.splits == {"filters1": apportion(48, speeds), "hidden": apportion(32, speeds)}
    assert moved.splits["filters1"][1] < 12
    assert moved.replicated == plan.replicated and "filters2" not in moved.layout_rules


def test_a_replicated_dim_must_be_an_unsplit_split_dim(tmp_path):
    spec = three_dim_model()
    with pytest.raises(ValueError, match="cannot replicate channels: not a split dim"):
        plan_layout(spec, ["/cpu:0", "/cpu:1"], [3, 1], BATCH, "model:2",
                    replicated=("channels",))
    with pytest.raises(ValueError, match="replicated='hidden': give \"auto\" or a list"):
        plan_layout(spec, ["/cpu:0", "/cpu:1"], [3, 1], BATCH, "model:2", replicated="hidden")
    plan = plan_layout(spec, ["/cpu:0", "/cpu:1"], [3, 1], BATCH, "model:2",
                       replicated=("filters2",))
    path = tmp_path / "plan.json"
    plan.to_json(path)
    text = path.read_text().replace('"dim": "filters2"', '"dim": "filters1"')
    path.write_text(text)
    with pytest.raises(ValueError, match="a split dim the plan does not split"):
        Plan.from_json(path)
