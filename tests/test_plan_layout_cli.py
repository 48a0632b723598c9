"""scripts/plan_layout.py run as a user would: plan JSON, a bad flag, measured speeds."""

import json
import math
import os
import subprocess
import sys

from hmp.graph import ModelConfig
from hmp.planning import Plan
from hmp.planning.from_graph import model_spec

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "scripts", "plan_layout.py")
TINY = ["--model=cnn2d", "--width=4", "--patch_size=5", "--bands=8", "--classes=4",
        "--batch_size=12"]


def plan_layout(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_given_speeds_give_a_plan_file(tmp_path):
    out = tmp_path / "plan.json"
    run = plan_layout(*TINY, "--speeds=3,2,1", "--mesh=model:3", f"--out={out}")
    assert run.returncode == 0, run.stderr
    plan = json.loads(out.read_text())
    assert plan["model"] == "cnn2d(width=4, input=5x5x8, classes=4)"
    assert plan["mesh"] == "model:3" and plan["devices"] == ["/cpu:0", "/cpu:1", "/cpu:2"]
    # 8 filters at 3:2:1 -> 4, 2.67, 1.33 -> [4, 3, 1]; 16 hidden -> 8, 5.33, 2.67 -> [8, 5, 3].
    assert plan["splits"] == {"filters1": [4, 3, 1], "filters2": [4, 3, 1], "hidden": [8, 5, 3]}
    assert plan["speeds"] == [3, 2, 1] and plan["time_unit"] == "relative"
    assert plan["batch_size"] == 12
    assert f"Plan for model '{plan['model']}'" in run.stdout and f"wrote {out}" in run.stdout
    Plan.from_json(out, model_spec=model_spec(ModelConfig("cnn2d", 5, 8, 4, width=4)))


def test_a_bad_flag_is_one_line_and_exit_code_2(tmp_path):
    run = plan_layout(*TINY, "--mesh=model:x", f"--out={tmp_path / 'plan.json'}")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [run.stderr.strip()]
    assert run.stderr.startswith("plan_layout: error: --mesh: bad mesh 'model:x'")
    assert "allowed" in run.stderr and not (tmp_path / "plan.json").exists()


def test_auto_speeds_are_measured(tmp_path):
    out = tmp_path / "plan.json"
    run = plan_layout(*TINY, "--speeds=auto", "--devices=/cpu:0,/cpu:2", "--warmup=1",
                      "--repeats=2", "--mesh=batch:2", f"--out={out}")
    assert run.returncode == 0, run.stderr
    plan = json.loads(out.read_text())
    assert plan["devices"] == ["/cpu:0", "/cpu:2"] and plan["time_unit"] == "s"
    assert all(math.isfinite(s) and s > 0 for s in plan["speeds"])
    assert sum(plan["splits"]["batch"]) == 12
    assert "profiling /cpu:2 (2/2)" in run.stderr and "Measured speeds" in run.stdout
