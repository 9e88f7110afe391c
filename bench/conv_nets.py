"""The two convolutional networks of bench_conv.py's network section, built three ways from the
same parameters: an ndws `MultiLayerNetwork`, the same model in PyTorch eager, and the kernel
floor (the model's convolutions, poolings and GEMMs alone, called through
`ndws.nn.functional` with every output preallocated).

* ``lenet``: DL4J's LeNetMNIST at batch 64 on 28x28x1 rows (``InputType.convolutional_flat``:
  the preprocessors reshape them), conv 5x5x20 and 5x5x50 with identity activations (as in
  DL4J's example), 2x2/2 max pooling after each, dense 500 relu, softmax 10.
* ``vgg``: a small VGG-style CIFAR network at batch 32 on 32x32x3 images: 3x3x32 twice, pool,
  3x3x64 twice, pool (padding 1, relu), dense 256 relu, softmax 10.

Both train with Adam (DL4J's and torch's defaults: lr 1e-3, betas 0.9 / 0.999, eps 1e-8) on
softmax cross-entropy averaged over the batch (ndws' NEGATIVELOGLIKELIHOOD after a softmax,
torch's ``CrossEntropyLoss``), without l2 (DL4J's example has 5e-4; left out so both sides do
the same work: torch's weight_decay would also decay the biases).
"""
from __future__ import annotations

import numpy as np

#: name -> (batch, image (c, h, w), rows input, layers); a layer is ("conv", n_out, k, pad,
#: activation), ("pool",), ("dense", n_out) or ("out", n_out)
NETS = {
    "lenet": (64, (1, 28, 28), True,
              [("conv", 20, 5, 0, "identity"), ("pool",), ("conv", 50, 5, 0, "identity"),
               ("pool",), ("dense", 500), ("out", 10)]),
    "vgg": (32, (3, 32, 32), False,
            [("conv", 32, 3, 1, "relu"), ("conv", 32, 3, 1, "relu"), ("pool",),
             ("conv", 64, 3, 1, "relu"), ("conv", 64, 3, 1, "relu"), ("pool",),
             ("dense", 256), ("out", 10)]),
}
LR = 1e-3


def describe(name):
    batch, (c, h, w), _, layers = NETS[name]
    return f"{name} b{batch} {h}x{w}x{c}"


def data(name, seed=0):
    """(features, one-hot labels, class indices) of one batch: rows of pixels for lenet,
    NCHW images for vgg."""
    batch, (c, h, w), rows, _ = NETS[name]
    rng = np.random.default_rng(seed)
    x = rng.random((batch, c * h * w) if rows else (batch, c, h, w), dtype=np.float32)
    classes = rng.integers(0, 10, batch)
    return x, np.eye(10, dtype=np.float32)[classes], classes


def ndws_net(name, mode="ENABLED", params=None):
    """The network in workspace mode `mode` (training and inference), its parameters `params`
    (a flat vector) or seed 1's."""
    from ndws.nn import (Adam, ConvolutionLayer, DenseLayer, InputType, MultiLayerConfiguration,
                         MultiLayerNetwork, OutputLayer, SubsamplingLayer)

    _, (c, h, w), rows, spec = NETS[name]
    layers = []
    for kind, *args in spec:
        if kind == "conv":
            n_out, k, p, act = args
            layers.append(ConvolutionLayer(kernel_size=k, padding=p, n_out=n_out,
                                           activation=act))
        elif kind == "pool":
            layers.append(SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2))
        elif kind == "dense":
            layers.append(DenseLayer(n_out=args[0], activation="relu"))
        else:
            layers.append(OutputLayer(n_out=args[0], activation="softmax",
                                      loss_function="negativeloglikelihood"))
    it = (InputType.convolutional_flat(h, w, c) if rows else InputType.convolutional(h, w, c))
    net = MultiLayerNetwork(MultiLayerConfiguration(
        layers, input_type=it, seed=1, updater=Adam(LR), training_workspace_mode=mode,
        inference_workspace_mode=mode))
    net.init(params)
    return net


def torch_model(name, net):
    """The same model in PyTorch, with `net`'s parameters (ndws' dense W is (n_in, n_out),
    torch's (n_out, n_in); the convolutions' are the same)."""
    import torch

    _, (c, h, w), rows, spec = NETS[name]
    mods = [torch.nn.Unflatten(1, (c, h, w))] if rows else []
    i = 0
    for kind, *args in spec:
        layer = net.get_layer(i)
        i += 1
        if kind == "conv":
            n_out, k, p, act = args
            conv = torch.nn.Conv2d(layer.n_in, n_out, k, padding=p)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(layer.params["W"].numpy()))
                conv.bias.copy_(torch.from_numpy(layer.params["b"].numpy()))
            mods.append(conv)
            if act == "relu":
                mods.append(torch.nn.ReLU())
        elif kind == "pool":
            mods.append(torch.nn.MaxPool2d(2, 2))
        else:
            if not any(isinstance(m, torch.nn.Flatten) for m in mods):
                mods.append(torch.nn.Flatten())
            lin = torch.nn.Linear(layer.n_in, args[0])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(layer.params["W"].numpy().T.copy()))
                lin.bias.copy_(torch.from_numpy(layer.params["b"].numpy()))
            mods.append(lin)
            if kind == "dense":
                mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def make_fit(net, x, y):
    """One `fit()` iteration on the batch (a DataSet of detached arrays, as an iterator's)."""
    import ndws
    from ndws.data.dataset import DataSet

    ds = DataSet(ndws.array(x, detached=True), ndws.array(y, detached=True))

    def step():
        net.fit(ds, progress=False)
    return step


def make_torch(model, x, classes):
    """One eager training step: forward, CrossEntropyLoss, backward, Adam."""
    import torch

    tx, ty = torch.from_numpy(x), torch.from_numpy(classes)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=LR)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(tx), ty).backward()
        opt.step()
    return step


def check_same(name, net, model, x, y, classes):
    """The two models compute the same score and gradients from the same parameters (so the
    contenders do the same work); raises AssertionError otherwise."""
    import torch

    import ndws
    from ndws.data.dataset import DataSet

    score = net.compute_gradient_and_score(DataSet(ndws.array(x, detached=True),
                                                   ndws.array(y, detached=True)))
    model.zero_grad(set_to_none=True)
    loss = torch.nn.CrossEntropyLoss()(model(torch.from_numpy(x)), torch.from_numpy(classes))
    loss.backward()
    assert abs(score - loss.item()) <= 1e-5 * max(1.0, abs(score)), (name, score, loss.item())
    theirs = {}
    for mod in model:
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            theirs[len(theirs)] = mod
    k = 0
    for layer in net.layers:
        if "W" not in layer.grads:
            continue
        mod = theirs[k]
        k += 1
        gw = layer.grads["W"].numpy()
        tw = mod.weight.grad.numpy()
        if isinstance(mod, torch.nn.Linear):
            tw = tw.T
        for got, want in ((gw, tw), (layer.grads["b"].numpy(), mod.bias.grad.numpy())):
            scale = max(float(np.abs(want).max()), 1e-12)
            err = float(np.abs(got - want).max()) / scale
            assert err < 1e-3, (name, type(layer).__name__, err)


def kernel_calls(name, net, x, threads):
    """The kernel floor's calls, in the order of an iteration: ``(label, ndws call, torch
    call)`` per layer and pass, each ndws call into preallocated outputs and scratch, each torch
    call the eager op of the same shapes (``torch.nn.functional`` forward, the aten backward
    kernel autograd calls, without the autograd engine)."""
    import torch

    import ndws
    import ndws.nn.functional as F

    batch, (c, h, w), rows, spec = NETS[name]
    rng = np.random.default_rng(1)
    f32 = np.float32
    aten = torch.ops.aten

    def empty(shape, dtype=f32):
        return ndws.empty(shape, dtype=dtype, detached=True)

    def randn(shape):
        return ndws.array(rng.standard_normal(shape, dtype=f32), detached=True)

    def t(a):
        return torch.from_numpy(np.asarray(a))

    a = ndws.array(x.reshape(batch, c, h, w), detached=True)
    fwd, bwd = [], []
    for i, (kind, *args) in enumerate(spec):
        layer = net.get_layer(i)
        if kind == "conv":
            n_out, k, p, act = args
            W, b = layer.params["W"], layer.params["b"]
            shape = (batch, n_out, a.shape[2] + 2 * p - k + 1, a.shape[3] + 2 * p - k + 1)
            y = empty(shape)
            s_f = empty(F.conv2d_scratch_bytes(a.shape, W.shape, padding=p, threads=threads),
                        np.uint8)
            s_b = empty(F.conv2d_scratch_bytes(a.shape, W.shape, padding=p, backward=True,
                                               threads=threads), np.uint8)
            dy, gw, gb = randn(shape), empty(W.shape), empty(b.shape)
            gx = empty(a.shape) if i > 0 else None
            ta, tw, tb, tdy = t(a), t(W), t(b), t(dy)
            label = f"{i} conv {layer.n_in}->{n_out} {k}x{k} {a.shape[2]}x{a.shape[3]}"
            relu = act == "relu"
            fwd.append((label + " fwd",
                        lambda a=a, W=W, b=b, p=p, act=act, y=y, s=s_f:
                        F.conv2d(a, W, b, padding=p, activation=act, out=y, scratch=s),
                        lambda ta=ta, tw=tw, tb=tb, p=p, relu=relu:
                        (torch.relu_ if relu else (lambda v: v))(
                            torch.nn.functional.conv2d(ta, tw, tb, padding=p))))
            need = [i > 0, True, True]
            bwd.append((label + " bwd",
                        lambda a=a, W=W, dy=dy, p=p, gx=gx, gw=gw, gb=gb, s=s_b:
                        F.conv2d_backward(a, W, dy, padding=p, need_input=gx is not None,
                                          grad_input=gx, grad_weight=gw, grad_bias=gb,
                                          scratch=s),
                        lambda tdy=tdy, ta=ta, tw=tw, p=p, n_out=n_out, need=need:
                        aten.convolution_backward(tdy, ta, tw, [n_out], [1, 1], [p, p],
                                                  [1, 1], False, [0, 0], 1, need)))
        elif kind == "pool":
            shape = a.shape[:2] + (a.shape[2] // 2, a.shape[3] // 2)
            y, idx, dy, gx = empty(shape), empty(shape, np.int32), randn(shape), empty(a.shape)
            ta, tdy = t(a), t(dy)
            t_idx = torch.nn.functional.max_pool2d(ta, 2, 2, return_indices=True)[1]
            label = f"{i} max-pool 2x2 {a.shape[1]}x{a.shape[2]}x{a.shape[3]}"
            fwd.append((label + " fwd",
                        lambda a=a, y=y, idx=idx:
                        F.max_pool2d(a, kernel_size=2, stride=2, out=y, indices=idx),
                        lambda ta=ta: torch.nn.functional.max_pool2d(ta, 2, 2,
                                                                     return_indices=True)))
            bwd.append((label + " bwd",
                        lambda a=a, dy=dy, idx=idx, gx=gx:
                        F.max_pool2d_backward(a, dy, kernel_size=2, stride=2, indices=idx,
                                              out=gx),
                        lambda ta=ta, tdy=tdy, ti=t_idx:
                        aten.max_pool2d_with_indices_backward(tdy, ta, [2, 2], [2, 2], [0, 0],
                                                              [1, 1], False, ti)))
        else:
            a = a.reshape(batch, -1)
            W, b = layer.params["W"], layer.params["b"]
            y, dy = empty((batch, W.shape[1])), randn((batch, W.shape[1]))
            gw, gx = empty(W.shape), empty(a.shape)
            act = "relu" if kind == "dense" else "identity"
            ta, tdy = t(a), t(dy)
            tw, tb = t(W).T.contiguous(), t(b)            # torch's (n_out, n_in)
            label = f"{i} dense {W.shape[0]}->{W.shape[1]}"
            relu = act == "relu"
            fwd.append((label + " fwd",
                        lambda a=a, W=W, b=b, act=act, y=y: F.linear(a, W, b, act, out=y),
                        lambda ta=ta, tw=tw, tb=tb, relu=relu:
                        (torch.relu_ if relu else (lambda v: v))(
                            torch.nn.functional.linear(ta, tw, tb))))
            bwd.append((label + " bwd (dW, dX)",
                        lambda a=a, W=W, dy=dy, gw=gw, gx=gx:
                        (ndws.gemm(a, dy, out=gw, trans_a=True),
                         ndws.gemm(dy, W, out=gx, trans_b=True)),
                        lambda ta=ta, tw=tw, tdy=tdy:
                        (torch.mm(tdy.T, ta), torch.mm(tdy, tw))))
        a = y
    return fwd + bwd[::-1]


def make_floor(name, net, x, threads):
    """The kernel floor of one iteration: every convolution (forward with its bias and fused
    activation; backward: the weight, bias and, but for the first layer, input gradients),
    pooling (forward keeping the arg-max, backward) and dense GEMM (forward with bias and
    activation, dW and dX), called directly with preallocated outputs and scratch
    (`kernel_calls`). What it leaves out is the network's own work: the loss, the activations'
    derivatives, the bias sums of the dense layers, the updater, and the Python around the
    kernels."""
    calls = [nd for _, nd, _ in kernel_calls(name, net, x, threads)]

    def step():
        for call in calls:
            call()
    return step
