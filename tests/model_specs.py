"""Small ModelSpecs whose costs the planning tests work out by hand (no TensorFlow)."""

from hmp.planning import ModelSpec, dense_layer_spec


def fc_model():
    """One dense layer 1000 -> 100, no bias, hidden units split over the model axis:
    F = 2e5 forward FLOPs and 1e5 weights per sample. Two devices of 1e9 FLOP/s at batch
    64: one device 38.4 ms (3 x forward), ``model:2`` 19.2 ms plus one all-gather of the
    output (12800 B by halves)."""
    return ModelSpec("fc", [dense_layer_spec("fc", 1000, 100, "hidden", "output", bias=False)],
                     (1000,))
