"""The compiled training iteration of a `MultiLayerNetwork` of built-in dense layers
(docs/networks.md, "The compiled iteration").

`DensePlan.run` is the forward and backward pass of `MultiLayerNetwork._gradient_and_score`
for a stack of `DenseLayer` under an `OutputLayer` (softmax with MCXENT or
NEGATIVELOGLIKELIHOOD), without dropout, l1 or l2: the same workspaces entered and closed in
the same order, the same arrays allocated in each of them, the same kernel entries called on
the same values (except the output layer's softmax, which nothing reads here), so the
parameters, the workspaces' statistics, the memory plan and every error come out as on the
general path. What it leaves out is the general path's Python per layer and per array (the
LayerWorkspaceMgr's lookups and borrows, the per-layer scope objects, the location checks of
what a layer returns), which cost as much as the kernels of a small network. Every other
network takes the general path.

The network's bookkeeping around a pass is not repeated here: `run` calls back where the
general path does, and the network does the rest for both (the listeners' hooks, the
regularisation). After the forward pass it calls `on_forward` with the activations (the
network's listeners of the forward pass); where layer i's gradients are final, the per-layer
gradient hook (`after_layer`, e.g. the MPI trainer starting that layer's allreduce).
"""
cimport cython

from ndws._arena cimport Arena, ThreadState, tstate, epoch_ptr, debug_mode_ptr, ndws_share
from ndws._core cimport NDArray, new_array, pin_foreign
from ndws._linalg cimport gemm_arrays
from ndws.nn._activations cimport ACT_IDENTITY, activation_code
from ndws.nn._linear cimport linear_into
from ndws._typedefs cimport intp_t

from ndws._arena import _end_scope_of, _scope_out
from ndws._ufuncs import _reduce_sum
from ndws.nn._act_entries import activation, activation_backward
from ndws.nn._layout import WS_ALL_LAYERS_ACT, WS_LAYER_WORKING_MEM, WS_SINGLE, epsilon_workspace
from ndws.nn._linear import linear
from ndws.nn._losses import softmax_cross_entropy
from ndws.workspace import get_workspace_manager

ndws_share(epoch_ptr(), debug_mode_ptr())     # this module's thread-state cache (_tls.h)

__all__ = ["DensePlan", "MODE_NONE", "MODE_SINGLE", "MODE_SEPARATE"]

# the training layouts of ndws.WorkspaceMode (ENABLED trains as SEPARATE)
MODE_NONE = 0
MODE_SINGLE = 1
MODE_SEPARATE = 2


cdef object _enter(dict workspaces, str name, object conf):
    # What LayerWorkspaceMgr.notify_scope_entered does for one type: enter the thread's
    # workspace `name`, creating it on its first use (so workspaces are created, and listed,
    # in the same order as on the general path).
    ws = workspaces.get(name)
    if ws is not None:
        ws.notify_scope_entered()
        return ws
    return get_workspace_manager().get_and_activate_workspace(conf, name)


cdef NDArray _alloc(object dtype, intp_t rows, intp_t cols, Arena target):
    # an uninitialized (rows, cols) array in `target`, or detached memory when it is None
    # (mgr.create_uninitialized: the same bytes in the same workspace)
    cdef Py_ssize_t shape[2]
    shape[0] = rows
    shape[1] = cols
    return new_array(dtype, 2, shape, False, False, target, target is None)


cdef NDArray _epsilon(int i, NDArray W, NDArray dz, intp_t rows, Arena target):
    # dL/d(input) := dz @ W.T in ACTIVATION_GRAD's workspace (`target`); none for the first
    # layer, whose input gradient nothing reads (Layer.input_gradient_needed)
    cdef NDArray eps
    if i == 0:
        return None
    eps = _alloc(W._dtype, rows, W._shape[0], target)
    gemm_arrays(dz, W, eps, 1.0, 0.0, False, True, NULL, NULL, "gemm")
    return eps


cdef int _linear(int i, NDArray a, NDArray W, object b, object name, int code, double alpha,
                 NDArray out) except -1:
    # out := f(a @ W + b). The first layer reads the caller's features: through `linear`'s
    # checks (another thread's array pinned, the error naming its role as on the general path);
    # the others read the network's own arrays, checked by construction.
    if i == 0:
        linear(a, W, b, name, out)
    else:
        linear_into(a, W, <NDArray>b, code, alpha, out)
    return 0


# ------------------------------------------------------------------------------------------------
# The plan

@cython.final
cdef class DensePlan:
    """The compiled iteration of one network's layers (built once, at `init`).

    Parameters
    ----------
    layers : list of Layer
        The network's DenseLayers and OutputLayer. Their parameter and gradient views
        (``layer.params``, ``layer.grads``) are read at each run: ndws.parallel's replicas
        point them at another network's buffers after the plan is built.
    activations : list of str
        Each layer's activation name (the last layer's is "softmax").
    keeps_input : list of bool
        Whether a layer keeps its pre-activation for the backward pass (in ArrayType.INPUT's
        workspace); relu and identity read their derivative off the output instead.
    configs : dict
        The network's workspace configurations by name (ndws.nn._layout).
    """

    cdef list layers, act, keeps, codes, alphas
    cdef int n
    cdef dict configs

    def __init__(self, list layers, list activations, list keeps_input, dict configs):
        cdef double alpha = 0.0
        self.layers = layers
        self.act = activations
        self.keeps = keeps_input
        self.n = len(layers)
        self.configs = configs
        # the kernels' activation codes, resolved once (the layers use the defaults' alpha)
        self.codes, self.alphas = [], []
        for name in activations:
            self.codes.append(activation_code(name, None, &alpha))
            self.alphas.append(alpha)

    def run(self, int mode, NDArray x, object labels, object after_layer=None,
            object on_forward=None):
        """One forward and backward pass on features `x` (n_samples, n_in) and `labels` in
        training layout `mode` (MODE_NONE / MODE_SINGLE / MODE_SEPARATE): the gradients in the
        layers' views, the score (without regularization) returned. `on_forward(activations)`,
        when given, is called after the forward pass with the input and every layer's output
        (the output layer's probabilities computed for it), at the general path's point;
        `after_layer(i)`, when given, as soon as layer i's gradients are final (last layer
        first)."""
        cdef ThreadState ts = tstate()
        cdef dict wss = ts._workspaces
        cdef dict conf = self.configs
        cdef int n = self.n, i
        cdef bint separate = mode == MODE_SEPARATE
        cdef Arena A = None, WM = None, E
        cdef Arena bp_target
        cdef NDArray a, y, z, dz, eps = None, xi, W
        cdef list inputs = [None] * n              # each layer's input
        cdef list kept = [None] * n                # what each layer's derivative is read off
        cdef list eps_open = []                    # SEPARATE: the epsilon scopes still open
        cdef intp_t rows = x._shape[0]
        cdef object dtype = x._dtype
        cdef list weights = [layer.params["W"] for layer in self.layers]
        cdef list biases = [layer.params["b"] for layer in self.layers]
        cdef list weight_grads = [layer.grads["W"] for layer in self.layers]
        cdef list bias_grads = [layer.grads["b"] for layer in self.layers]
        cdef list acts = [x] if on_forward is not None else None
        score = None
        scope = _scope_out()
        try:
            if mode != MODE_NONE:
                name = WS_ALL_LAYERS_ACT if separate else WS_SINGLE
                A = _enter(wss, name, conf[name])
            try:
                # forward: each layer's working memory opened and closed around it (SEPARATE);
                # activations and kept pre-activations in the iteration's workspace
                a = x
                for i in range(n):
                    W = <NDArray>weights[i]
                    if separate:
                        WM = _enter(wss, WS_LAYER_WORKING_MEM, conf[WS_LAYER_WORKING_MEM])
                    try:
                        y = _alloc(dtype, rows, W._shape[1], A)
                        if self.keeps[i]:
                            z = _alloc(dtype, rows, W._shape[1], A)
                            _linear(i, a, W, biases[i], "identity", ACT_IDENTITY, 0.0, z)
                            if i < n - 1 or acts is not None:
                                activation(self.act[i], z, y)
                            # else: the output's probabilities are allocated (the memory
                            # plan counts them) but not computed: the loss works on z, and
                            # only a listener of the forward pass would read them
                        else:
                            _linear(i, a, W, biases[i], self.act[i], self.codes[i],
                                    self.alphas[i], y)
                            z = y
                    finally:
                        if separate:
                            WM.close()
                    inputs[i] = a
                    kept[i] = z
                    a = y
                    if acts is not None:
                        acts.append(y)
                if acts is not None:
                    on_forward(acts)
                # backward; in SEPARATE mode the epsilons ping-pong between two workspaces,
                # each closed once the layer below has read it
                for i in range(n - 1, -1, -1):
                    W = <NDArray>weights[i]
                    if separate:
                        name = epsilon_workspace(i)
                        E = _enter(wss, name, conf[name])
                        eps_open.append(E)
                        WM = _enter(wss, WS_LAYER_WORKING_MEM, conf[WS_LAYER_WORKING_MEM])
                    try:
                        bp_target = WM if separate else A
                        dz = _alloc(dtype, rows, W._shape[1], bp_target)
                        if i == n - 1:
                            score = softmax_cross_entropy(kept[i], labels, None, None, "mean",
                                                          True, dz)[0]
                        else:
                            activation_backward(self.act[i], kept[i], eps, dz)
                        # the layer's input, pinned when it is another thread's (layer 0's
                        # features), as ndws.gemm would
                        xi = <NDArray>pin_foreign(inputs[i], "gemm", "a")
                        gemm_arrays(xi, dz, <NDArray>weight_grads[i], 1.0, 0.0, True, False, NULL,
                                    NULL, "gemm")
                        _reduce_sum(dz, 0, None, bias_grads[i])
                        eps = _epsilon(i, W, dz, rows, E if separate else A)
                    finally:
                        if separate:
                            WM.close()
                    # layer i's gradients are final (the general path's point after
                    # backprop_gradient / compute_score_and_gradient)
                    if after_layer is not None:
                        after_layer(i)
                    if len(eps_open) > 1:
                        (<Arena>eps_open.pop(0)).close()
                while eps_open:
                    (<Arena>eps_open.pop()).close()
            finally:
                if A is not None:
                    A.close()
                while eps_open:             # left open by a failure
                    (<Arena>eps_open.pop()).close()
        finally:
            _end_scope_of(scope, True)
        return score
