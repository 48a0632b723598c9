"""scripts/bench_rebalance.py: the hmp.train command of its runs and the flags it refuses
(the runs themselves take minutes; docs/benchmarks.md, "Dynamic load"). In a process of
its own: the script's --train_fraction is hmp.scene_flags' too, which the test session
imports."""

from script_modules import json_of_child

CHECK = '''
import json
import bench_rebalance as bench
from absl import flags
from absl.testing import flagsaver

found = {}
for given in ([], ["--batch_norm=sync"]):
    with flagsaver.flagsaver():
        flags.FLAGS(["bench_rebalance", "--epochs=6", *given])
        found[" ".join(given)] = bench.train_command("cnn2d", "127.0.0.1:1,127.0.0.1:2",
                                                     "epoch", "/r")
with flagsaver.flagsaver():
    flags.FLAGS(["bench_rebalance", "--width=4", "--repeats=2", "--steps_per_run=2"])
    try:
        bench.main(["bench_rebalance"])
    except bench.cli.UsageError as refused:
        found["refused"] = str(refused)
print(json.dumps(found))
'''


def test_runs_train_with_the_batch_norm_asked_for_and_unused_flags_are_refused():
    found = json_of_child(CHECK)
    for given, mode in (("", "local"), ("--batch_norm=sync", "sync")):   # hmp.train's default
        assert found[given][1:] == [
            "-m", "hmp.train", "--cluster=127.0.0.1:1,127.0.0.1:2",
            "--model=cnn2d", "--batch_size=256", "--epochs=6", "--train_fraction=0.6",
            "--mesh=batch:2", "--notta", "--rebalance=epoch",
            "--batch_norm=" + mode, "--steps_per_run=1", "--model_dir=/r/epoch"]
    assert found["refused"] == ("--width, --repeats: bench_hetero.py's, not used here "
                                "(hmp.train trains the model at its default width)")
