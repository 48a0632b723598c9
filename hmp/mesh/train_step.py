"""The training step: every gradient is computed before any variable changes.

Mesh-TensorFlow reads a variable through a cast to its own dtype, which is no
op, so a layer's computation reads the variable itself. In TF1 graph mode one
``session.run`` that contains both the gradients and the optimizer's assigns
may then run an assign to one variable while another variable's gradient is
still reading it: silently wrong gradients, more likely the more devices run
in parallel. :func:`train_step` routes all gradients through one barrier, so
every update starts only after the whole backward pass has finished.

Where no variable is split (a pure batch split, or one device), every device holds
its own copy of each variable, read by that device's forward and backward pass only,
and each device's gradients depend on its own passes; so each device's updates wait
for that device's own summed gradients (``ops.barrier``'s ``per_device_if_replicated``),
and the barrier adds no exchange between the devices to the all-reduce's.

The gradient sums over the batch axis run as one all-reduce per step
(``hmp.mesh.bucketing``), not one per weight tensor.

Mixed precision (``hmp.graph.graph_config.PRECISIONS``). A variable computed in a low precision
(``mtf.VariableDType``: float32 master and slices, bfloat16 or float16 activation) gets
its gradient in that precision; the step sums it in float32 (the variable's slice
dtype: one rounding fewer than a low-precision sum, and still one all-reduce a step),
so the optimizer works on float32 gradients, weights and slots. A float16 model's
small gradients would underflow: ``loss_scale`` multiplies the loss before the backward
pass and divides the float32 gradients after the sum. A power of two, both are exact
(barring overflow), so the update is the unscaled one.
"""

from hmp.mesh import ops
from hmp.mesh.bucketing import reduce_together
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()


def train_step(loss, optimizer, loss_scale=1.0):
    """Returns the mtf update operations of one ordered optimizer step.

    Every trainable variable of the loss's graph that the loss depends on is
    updated, with its gradient in its slice dtype. The step advances no global step
    (a caller that keeps one advances it): random draws, such as dropout's, are keyed
    by a step only on a mesh built with ``device_inputs``, else drawn anew at every
    run (``HeteroMeshImpl.random``).

    Args:
      loss: a scalar mtf Tensor.
      optimizer: an ``mtf.optimize.Optimizer`` (SGD, momentum, Adam,
        Adafactor, or hmp's LARS).
      loss_scale: the backward pass runs on ``loss * loss_scale``; the summed
        gradients are divided by it (a power of two for an exact round trip).

    Returns:
      a list of mtf Operations; lower them and run their TensorFlow ops.
    """
    variables = loss.graph.trainable_variables
    grads = mtf.gradients([loss if loss_scale == 1 else loss * loss_scale],
                          [v.outputs[0] for v in variables])
    trained = [(g, v) for g, v in zip(grads, variables) if g is not None]
    if not trained:
        raise ValueError("train_step: the loss depends on none of the variables")
    summed = reduce_together([g for g, _ in trained], [v.slice_dtype for _, v in trained],
                             name="gradient_sums")
    if loss_scale != 1:
        summed = [g * (1.0 / loss_scale) for g in summed]
    ordered_grads = ops.barrier(summed, per_device_if_replicated=True, name="all_gradients")
    return optimizer.apply_grads(ordered_grads, [v for _, v in trained])
