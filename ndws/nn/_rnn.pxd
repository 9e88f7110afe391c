# C-level API of ndws' recurrent time loops (ndws.nn._rnn), for other Cython modules: the layout
# of the cache the forward writes for the backward, so a layer's compiled code can place it
# (BP working memory) and read from it without a Python call.

# The cache of a forward pass over T steps of a batch of B: a C-contiguous (T, B, width) array
# of the compute dtype, one row per (step, example) in time-major order. LSTM and GravesLSTM
# (n = n_out): [gates (g, f, o, i) activated: 4n | c~ (the cell before the mask): n |
# act(c~): n | h (the output, masked): n | the gates' pre-activations: 4n, only when `with_z`].
# SimpleRnn: [act(z): n | h: n | z: n, only when `with_z`]. `with_z` is true unless the layer
# activation and the gate activation are identity, sigmoid or tanh (whose derivatives the
# backward takes from their outputs).
cdef Py_ssize_t lstm_cache_width(Py_ssize_t n, bint with_z) noexcept nogil
cdef Py_ssize_t simple_rnn_cache_width(Py_ssize_t n, bint with_z) noexcept nogil
# Whether an activation code (ndws.nn._activations' ACT_*) needs its input for its derivative.
cdef bint needs_input(int code) noexcept nogil
