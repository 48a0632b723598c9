"""hmp's GPU rules, decided on device lists and traces (no GPU needed): float32 in full
where a GPU is listed (hmp.mesh.numerics), and each device's busy time from a trace
as TensorFlow's GPU tracer writes it, or from step timing where it holds no kernel."""

import json
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf2
import tensorflow.compat.v1 as tf

import hmp
from cli_batch import HUNG_S
from hmp.mesh.numerics import exact_float32, rounds_float32
from hmp.run.profiler import busy_times, step_timed


@pytest.fixture
def tf32_default():
    """TensorFloat-32 on (TensorFlow's default) before the test and after it: it is a
    switch of the whole process."""
    tf2.config.experimental.enable_tensor_float_32_execution(True)
    yield
    tf2.config.experimental.enable_tensor_float_32_execution(True)


@pytest.mark.parametrize("devices, rounds", [
    (["/cpu:0"], False),
    (["/cpu:0", "/cpu:1", "/job:worker/task:1/device:CPU:0"], False),
    (["/cpu:0", "/gpu:0"], True),
    (["/job:worker/task:1/device:GPU:0"], True),
    (["/device:TPU:0"], True),
    ([""], True),   # no type: TensorFlow places ops on a GPU where there is one
])
def test_float32_may_round_on_any_device_but_a_cpu(devices, rounds):
    assert rounds_float32(devices) is rounds


def test_the_engine_turns_tf32_off_for_a_mesh_with_a_gpu(tf32_default):
    """HeteroMeshImpl, what every graph of hmp starts with, decides before any op is
    built; a mesh of CPUs leaves TensorFlow's default. The mesh needs no real GPU."""
    hmp.HeteroMeshImpl("model:2", "filters1:model", ["/cpu:0", "/cpu:1"], {"filters1": [3, 1]})
    assert tf2.config.experimental.tensor_float_32_execution_enabled()
    hmp.HeteroMeshImpl("model:2", "filters1:model", ["/cpu:0", "/gpu:0"], {"filters1": [3, 1]})
    assert not tf2.config.experimental.tensor_float_32_execution_enabled()
    assert exact_float32(["/cpu:0"])   # and a later CPU-only list keeps it off


def add_node(dev_stats, label, start_us, length_us):
    dev_stats.node_stats.add(node_name=label.partition(" ")[0], timeline_label=label,
                             all_start_micros=start_us, all_end_rel_micros=length_us)


def gpu_trace(with_kernels):
    """A traced step of /cpu:0 and /gpu:0 named as TensorFlow writes it: the executors'
    records under the full device names; with ``with_kernels`` (CUPTI found), the GPU
    tracer's, named without job or task (xplane_to_step_stats.cc)."""
    metadata = tf.RunMetadata()
    dev_stats = metadata.step_stats.dev_stats
    add_node(dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0"),
             "a = MatMul(x, w)", 0, 30)                                # [0, 30] us
    launches = dev_stats.add(device="/job:localhost/replica:0/task:0/device:GPU:0")
    add_node(launches, "b = Conv2D(x, w)", 10, 2)                      # [10, 12]
    add_node(launches, "c = Relu(b)", 12, 2)                           # [12, 14]
    add_node(launches, "r = _Recv()", 0, 500)                          # waits: left out
    if with_kernels:
        for name in ("/device:GPU:0/stream:7", "/device:GPU:0/stream:all"):
            stream = dev_stats.add(device=name)
            add_node(stream, "volta_scudnn_128x64_relu kernel", 20, 100)   # [20, 120]
            add_node(stream, "relu_kernel kernel", 150, 10)                  # [150, 160]
        # copies and host threads waiting on the GPU: not its work
        add_node(dev_stats.add(device="/device:GPU:0/stream:9<MemcpyH2D>"), "MemcpyH2D",
                 200, 300)
        add_node(dev_stats.add(device="/device:GPU:0/memcpy"), "MemcpyH2D", 200, 300)
        add_node(dev_stats.add(device="/device:GPU:0/sync"), "cuStreamSynchronize", 0, 900)
    return metadata


def test_a_gpus_busy_time_is_its_launches_and_kernels_not_its_copies_or_waits():
    metadata = gpu_trace(with_kernels=True)
    devices = ["/cpu:0", "/gpu:0"]
    # GPU: [10, 14] launches, [20, 120] and [150, 160] kernels: 4 + 100 + 10 us
    assert busy_times(metadata, devices, 1.0) == pytest.approx([30e-6, 114e-6])
    assert step_timed(metadata, devices) == [False, False]
    # the mesh may name the GPU in full: the tracer's records are this process's
    full = ["/job:localhost/replica:0/task:0/device:GPU:0"]
    assert busy_times(metadata, full, 1.0) == pytest.approx([114e-6])


def test_a_gpu_traced_without_kernels_is_busy_for_the_whole_step():
    """No CUPTI: only the launches (4 us) are recorded; the step's 2.5 ms is its time."""
    metadata = gpu_trace(with_kernels=False)
    devices = ["/cpu:0", "/gpu:0"]
    assert busy_times(metadata, devices, 2.5e-3) == pytest.approx([30e-6, 2.5e-3])
    assert step_timed(metadata, devices) == [False, True]


def test_a_cluster_tasks_gpu_takes_no_local_kernels():
    """The GPU tracer names no task: its kernels are this process's GPU's, never a
    worker's, whose busy time is then the step's."""
    metadata = gpu_trace(with_kernels=True)
    add_node(metadata.step_stats.dev_stats.add(
        device="/job:worker/replica:0/task:1/device:GPU:0"), "d = Conv2D(x, w)", 0, 5)
    devices = ["/gpu:0", "/job:worker/task:1/device:GPU:0"]
    assert busy_times(metadata, devices, 3e-3) == pytest.approx([114e-6, 3e-3])
    assert step_timed(metadata, devices) == [False, True]


def test_a_deterministic_run_builds_every_graph_with_seeds(tmp_path, small_scene):
    """--deterministic turns on op determinism before any graph: a random op without a
    seed would then stop the run (RuntimeError). A process of its own: the switch
    cannot be turned back, and tests/cli_batch.py's interpreter serves other runs."""
    args = ["--deterministic", "--model=cnn2d", "--width=4", "--patch_size=5",
            "--batch_size=64", "--devices=/cpu:0,/cpu:1", "--speeds=2,1", "--mesh=model:2",
            "--epochs=1", "--notta", *small_scene, "--model_dir=%s" % tmp_path]
    # hmp.train as `python -m` runs it, then whether op determinism was on in its process
    program = ("import runpy, sys\n"
               "sys.argv = ['hmp.train', *sys.argv[1:]]\n"
               "try:\n"
               "    runpy.run_module('hmp.train', run_name='__main__')\n"
               "except SystemExit as end:\n"
               "    from tensorflow.python.framework import config\n"
               "    print('determinism:', config.is_op_determinism_enabled())\n"
               "    raise\n")
    run = subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                         text=True, timeout=HUNG_S, cwd=pathlib.Path(__file__).parents[2])
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "determinism: True", run.stdout[-2000:]
    assert json.loads((tmp_path / "results.json").read_text())["flags"]["deterministic"]


def test_a_task_is_step_timed_only_when_its_gpu_left_no_kernels():
    """A mesh device may name a task alone (scripts/bench_hetero.py): its CPU ops are
    its busy time; a GPU of it that launched ops but left no kernel makes it the step's."""
    metadata = tf.RunMetadata()
    dev_stats = metadata.step_stats.dev_stats
    add_node(dev_stats.add(device="/job:worker/replica:0/task:0/device:CPU:0"),
             "a = Conv2D(x, w)", 0, 40)
    add_node(dev_stats.add(device="/job:worker/replica:0/task:1/device:CPU:0"),
             "b = Conv2D(x, w)", 0, 20)
    add_node(dev_stats.add(device="/job:worker/replica:0/task:1/device:GPU:0"),
             "c = Conv2D(x, w)", 25, 2)
    tasks = ["/job:worker/task:0", "/job:worker/task:1"]
    assert busy_times(metadata, tasks, 5e-3) == pytest.approx([40e-6, 5e-3])
    assert step_timed(metadata, tasks) == [False, True]
