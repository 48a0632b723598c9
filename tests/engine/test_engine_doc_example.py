"""docs/engine.md's example runs as written: an uneven 2 x 3 mesh trains three steps."""

import math
import pathlib

import tensorflow.compat.v1 as tf

DOC = pathlib.Path(__file__).parents[2] / "docs" / "engine.md"


def test_the_engine_example_trains_three_steps_as_written(capsys):
    example = DOC.read_text().split("```python")[1].split("```")[0]
    with tf.Graph().as_default():
        namespace = {}
        exec(compile(example, str(DOC), "exec"), namespace)   # noqa: S102
    losses = [float(line) for line in capsys.readouterr().out.split()]
    assert len(losses) == 3 and all(math.isfinite(x) and x > 0 for x in losses), losses
    # each device holds its own part of the first convolution's filters: 7, 4, 1 in
    # each of the two batch rows
    lowering = namespace["lowering"]
    split = [(variable, laid_out) for variable, laid_out in lowering.variables.items()
             if "filters1" in variable.outputs[0].shape.dimension_names]
    assert split
    for variable, laid_out in split:
        axis = variable.outputs[0].shape.dimension_names.index("filters1")
        assert [s.shape[axis] for s in laid_out.laid_out_tensor.tensor_list] == [7, 4, 1] * 2
        assert [s.device for s in laid_out.laid_out_tensor.tensor_list] == [
            "/device:CPU:%d" % i for i in range(6)]
