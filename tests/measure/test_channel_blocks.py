"""hmp.measure.channel_blocks: each device's channel block from its host's CPU flags."""

import tensorflow.compat.v1 as tf

from hmp.measure.channel_blocks import CPU_FLAGS_FILE, channel_blocks, lanes_of

FLAGS = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 %s\n\n"


def test_the_widest_vector_set_gives_the_lanes():
    assert lanes_of(FLAGS % "avx avx2 avx512f avx512bw") == 16
    assert lanes_of(FLAGS % "avx avx2 fma") == 8
    assert lanes_of(FLAGS % "avx") == 8
    assert lanes_of(FLAGS % "ssse3") == 1
    # avx512f names a set, "avx512" alone or inside another word does not
    assert lanes_of(FLAGS % "avx512_vnni") == 1
    assert lanes_of("processor\t: 0\nFeatures\t: fp asimd\n") == 1   # no flags line (ARM)


def test_every_cpu_reads_its_hosts_flags_and_a_gpu_has_none():
    expected = lanes_of(open(CPU_FLAGS_FILE).read())
    config = tf.ConfigProto(device_count={"CPU": 2})
    assert channel_blocks(["/cpu:0", "/cpu:1"], session_config=config) == [expected] * 2
    assert channel_blocks(["/gpu:0"]) == [1]   # no session: a GPU is not read


def test_a_worker_reads_the_flags_on_its_own_task():
    server = tf.train.Server.create_local_server()
    device = "/job:localhost/task:0/device:CPU:0"
    assert channel_blocks([device], target=server.target) == [
        lanes_of(open(CPU_FLAGS_FILE).read())]
