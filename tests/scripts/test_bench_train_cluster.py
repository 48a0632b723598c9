"""scripts/bench_train_cluster.py: the hmp.train commands of its runs, the arithmetic of
its summary and table on made-up numbers, and the flags it refuses. Nothing here runs
or times training: the speeds are measured by the script itself (docs/benchmarks.md,
"The split step at the default batch"). In a process of its own: its --epochs is
hmp.train's too, which the test session may import."""

import statistics

import pytest

from script_modules import json_of_child

CHECK = '''
import json
import bench_train_cluster as bench
from absl import flags
from absl.testing import flagsaver

found = {}
for given in ([], ["--batch_size=256"]):
    with flagsaver.flagsaver():
        flags.FLAGS(["bench_train_cluster", "--epochs=7", *given])
        found[" ".join(given)] = [bench.train_command("hybridsn", "h:1,h:2", name, "/r")
                                  for name in bench.RUNS]
for given in (["--width=4", "--batch_norm=sync"], ["--epochs=6"], ["--pairs=0"]):
    with flagsaver.flagsaver():
        flags.FLAGS(["bench_train_cluster", *given])
        try:
            bench.main(["bench_train_cluster"])
        except bench.cli.UsageError as refused:
            found[" ".join(given)] = str(refused)
# made-up numbers, no clock: each epoch's end (1..6) and rate; 12 steps of 32 an epoch
MADE_UP_ENDS = (10.0, 13.0, 15.0, 16.0, 18.0, 19.0)
MADE_UP_RATES = (100, 150, 200, 300, 400, 600)
found["made_up"] = {"ends": MADE_UP_ENDS, "rates": MADE_UP_RATES, "samples": 12 * 32}
ended = dict(zip(range(1, 7), MADE_UP_ENDS))
history = [{"steps": 12, "samples_per_second": rate} for rate in MADE_UP_RATES]
task0 = "/job:worker/task:0/device:CPU:0"
# priced alone at the batch of 32: 0.1 s and 0.3 s a step (320 and 106.7 samples/s); a
# device that fits no batch alone has no step
plan = {"mesh": "batch:2", "splits": {"batch": [20, 12]}, "devices": [task0, "b"],
        "alone": [{"device": task0, "step": 0.1}, {"device": "b", "step": 0.3},
                  {"device": "c", "step": None}]}
alone = {"mesh": "batch:1", "splits": {"batch": [32]}, "devices": [task0], "alone": []}
cluster = bench.summary(ended, {"history": history, "plans": [plan, alone]}, 32)
task0 = bench.summary(ended, {"history": [{**h, "samples_per_second": 200} for h in history],
                              "plans": [alone]}, 32)
found["summaries"] = [cluster, task0]
with flagsaver.flagsaver():
    flags.FLAGS(["bench_train_cluster", "--epochs=7"])
    found["table"] = bench.table("hybridsn", [{"cluster": cluster, "task 0 alone": task0}] * 2)
print(json.dumps(found))
'''


@pytest.fixture(scope="module")
def found():
    return json_of_child(CHECK)


def test_the_cluster_run_takes_every_default_and_the_other_task_0_alone(found):
    for given, batch in (("", []), ("--batch_size=256", ["--batch_size=256"])):
        cluster, alone = found[given]
        assert cluster[1:] == ["-m", "hmp.train", "--cluster=h:1,h:2", "--model=hybridsn",
                               "--epochs=7", *batch, "--model_dir=/r"]
        assert alone[1:] == ["-m", "hmp.train", "--cluster=h:1,h:2", "--model=hybridsn",
                             "--epochs=7", *batch, "--devices=/job:worker/task:0/device:CPU:0",
                             "--model_dir=/r"]


def test_summary_and_table_arithmetic_on_made_up_numbers(found):
    """The summary's and table's formulas applied to CHECK's made-up epoch ends and rates
    (``found["made_up"]``): the expected values are those formulas worked in the test;
    no time is measured or compared."""
    made_up = found["made_up"]
    last_rates, ends = made_up["rates"][-3:], made_up["ends"]
    cluster, task0 = found["summaries"]
    # the last 3 epochs' harmonic mean (400); their samples over their ends' span (19 - 15);
    # the plan it ended on (the trial's device alone), the speeds of its first
    assert statistics.harmonic_mean(last_rates) == pytest.approx(400.0)
    assert cluster == {"hmp_samples_per_s": pytest.approx(statistics.harmonic_mean(last_rates)),
                       "wall_samples_per_s": pytest.approx(
                           3 * made_up["samples"] / (ends[5] - ends[2])),
                       "plan": "batch:1 batch=[32]", "devices": 1,
                       "speeds": {"/job:worker/task:0/device:CPU:0": pytest.approx(320.0),
                                  "b": pytest.approx(320 / 3)}}
    assert task0["hmp_samples_per_s"] == pytest.approx(200.0)
    assert task0["plan"] == "batch:1 batch=[32]" and task0["devices"] == 1
    text, median = found["table"]
    # T* = 200 * (320 + 106.7) / 320 = 266.7 samples/s: T*/T = 400 / 266.7
    assert median == pytest.approx(2.0) and text.endswith(
        "\nT*/T (hmp's count; T* from task 0 alone and the devices' priced speeds alone): "
        "1.50 1.50\n"
        "cluster / task 0 alone: 2.00x 2.00x (hmp), 1.00x 1.00x (wall); median 2.00x "
        "(goal >= 1.15: met)")


def test_flags_it_does_not_use_and_too_few_epochs_or_pairs_are_refused(found):
    assert found["--width=4 --batch_norm=sync"] == (
        "--width, --batch_norm: bench_hetero.py's, not used here (hmp.train trains with its "
        "defaults)")
    assert found["--epochs=6"] == "--epochs=6: must be at least 7"
    assert found["--pairs=0"] == "--pairs=0: must be at least 1"
