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

# The time loops' entries for ndws.nn._rnn_entries (the public functions, whose docstrings
# describe the arguments): `kind` K_LSTM (GravesLSTM with peep) or K_SIMPLE; errors name `op`.
cdef enum:
    K_LSTM = 0
    K_SIMPLE = 1
cdef tuple rnn_forward(int kind, object x, object W, object RW, object b, object h0, object c0,
                       object mask, object activation, object gate_activation, bint peep,
                       object data_format, object out, object h_out, object c_out, object cache,
                       object loop_workspace, object scratch, str op)
cdef tuple rnn_backward(int kind, object x, object W, object RW, object cache, object grad_output,
                        object h0, object c0, object mask, object grad_h, object grad_c,
                        object activation, object gate_activation, bint peep, object data_format,
                        object back_length, bint need_input, object grad_input, object grad_W,
                        object grad_RW, object grad_b, object grad_h0, object grad_c0,
                        object loop_workspace, object scratch, str op)
# Bytes of scratch one call needs at most (the *_scratch_bytes functions' answer).
cdef Py_ssize_t rnn_scratch_bytes(int kind, object batch, object n_in, object n_out, object time,
                                  object dtype, bint backward, bint peep, bint cache, bint mask,
                                  bint loop, object back_length, str op) except -1
# Whether the cache holds the pre-activations (see lstm_cache_width) for these activations.
cdef bint with_z(object activation, object gate_activation, str op) except -1
