"""Optimizers for hmp's training step, by name.

SGD, Adam and Adafactor are Mesh-TensorFlow's own. Momentum is hmp's:
Mesh-TF's ``MomentumOptimizer`` assigns the velocity slot and then subtracts
the slot *variable* from the weights, so in one TF1 ``session.run`` the
subtraction may read the velocity before or after it is updated. hmp's
version subtracts the freshly computed velocity instead. LARS (layer-wise
adaptive rate scaling, You et al. 2017; used for large batches by Wang et al.,
see BACKGROUND.md) scales each variable's step by its weight-to-gradient norm
ratio; the norms are over the whole tensor, so a split variable gets exactly
the single-device step.
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()


class Momentum(mtf.optimize.Optimizer):
    """Heavy-ball momentum: v <- m v + step;  w <- w - v, with step = lr g."""

    def __init__(self, learning_rate, momentum=0.9):
        self.learning_rate = learning_rate
        self.momentum = momentum

    def step(self, grad, var):
        """This step's change before momentum; subclasses scale it."""
        return grad * self.learning_rate

    def apply_grad(self, grad, var):
        velocity = mtf.get_variable(var.mesh, var.name + "/momentum", var.shape,
                                    dtype=var.dtype, trainable=False,
                                    initializer=tf.zeros_initializer())
        new_velocity = velocity * self.momentum + self.step(grad, var)
        return [mtf.assign(velocity, new_velocity), mtf.assign_sub(var, new_velocity)]


class Lars(Momentum):
    """LARS: momentum whose step is scaled per variable.

    step = lr local_lr (g + weight_decay w), with
    local_lr = trust * |w| / (|g| + weight_decay |w|)  (1 where a norm is 0)
    """

    def __init__(self, learning_rate, momentum=0.9, weight_decay=1e-4, trust=1e-3):
        super().__init__(learning_rate, momentum)
        self.weight_decay = weight_decay
        self.trust = trust

    def step(self, grad, var):
        weights = var.value
        weight_norm = mtf.sqrt(mtf.reduce_sum(mtf.square(weights)))
        grad_norm = mtf.sqrt(mtf.reduce_sum(mtf.square(grad)))
        denominator = grad_norm + self.weight_decay * weight_norm
        both_positive = mtf.cast(mtf.greater(weight_norm * grad_norm, 0.0), weights.dtype)
        ratio = self.trust * weight_norm / (denominator + (1.0 - both_positive))
        local_lr = both_positive * ratio + (1.0 - both_positive)
        return (grad + self.weight_decay * weights) * (local_lr * self.learning_rate)


OPTIMIZERS = {
    "sgd": lambda lr: mtf.optimize.SgdOptimizer(lr),
    "momentum": lambda lr: Momentum(lr, 0.9),
    "adam": lambda lr: mtf.optimize.AdamWeightDecayOptimizer(lr),
    "adafactor": lambda lr: mtf.optimize.AdafactorOptimizer(learning_rate=lr),
    "lars": lambda lr: Lars(lr),
}


def make_optimizer(name, learning_rate):
    """The optimizer called ``name`` (one of ``OPTIMIZERS``) at ``learning_rate``."""
    if name not in OPTIMIZERS:
        raise ValueError("optimizer %r is not known; choose one of %s"
                         % (name, sorted(OPTIMIZERS)))
    return OPTIMIZERS[name](learning_rate)
