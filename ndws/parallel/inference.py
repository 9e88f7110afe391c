"""`ParallelInference`: one `MultiLayerNetwork` or `ComputationGraph` served to many calling
threads (DL4J's ``ParallelInference``), its requests merged into batches (docs/parallel.md).
A graph's request is one array per input; requests are merged input by input (DL4J's
"horizontal" batching of multi-input requests) and each caller gets its rows of every output.

The served network is a snapshot: its parameters are copied once into one read-only flat
array that every replica's layers view (no copy per worker), so the caller may go on training
the model it passed; `update_model` takes a new snapshot and swaps it in atomically. A snapshot
of a model that trains in another thread is taken at an iteration boundary (the network's
busy state, ndws.nn._busy, has the caller wait for the iteration's end), never torn.

* SEQUENTIAL and BATCHED: `workers` threads named ``InferenceThread-<i>`` take requests from one
  queue of at most `queue_limit` batches. SEQUENTIAL runs each request as it came; BATCHED
  appends a request to the newest queued batch while that batch has not been taken by a worker,
  holds the same feature shape and stays within `batch_limit` rows: requests that arrive while
  the workers are busy are the batch, with no timing window (DL4J's rule). A worker copies the
  batch's rows into its staging array, runs one forward pass in its own workspaces, and hands
  each caller a view of its rows of the detached result.
* INPLACE: no threads; the calling thread runs one of `workers` replicas, picked by
  `load_balance_mode`, in its own workspaces.
"""
from __future__ import annotations

import collections
import copy
import itertools
import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

import ndws
from ndws._core import NDArray
from ndws.nn._model import index_reader, numbers
from ndws.parallel.modes import (Builder, InferenceMode, LoadBalanceMode, Stoppable,
                                 check_model, option_enum, option_int)

__all__ = ["ParallelInference"]

log = logging.getLogger("ndws")


class _Request:
    """One call's input and, once served, its result or error. A blocking `output` waits on
    `done` (held from creation, released when its result is ready: see `_Relay`); `submit`
    gets `future` instead."""

    __slots__ = ("x", "rows", "key", "vector", "result", "error", "done", "future",
                 "abandoned")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.future: Future | None = None
        self.x: Any = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False

    def finish(self, result: Any, error: BaseException | None) -> bool:
        """Record the outcome; True when a blocked caller is to be woken (by the relay)."""
        self.x = None                       # the caller's input is not kept past its call
        fut = self.future
        if fut is None:
            self.result, self.error = result, error
            return True
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
        return False


class _Relay:
    """Wakes the callers whose results are ready, one at a time, each woken caller waking the
    next as it leaves.

    Woken all at once, the callers of a batch each wake, find the GIL taken (by the worker or
    an earlier caller), sleep on it and wake again. Passed on like a baton, a caller is woken
    while the one before it returns to its own code and soon blocks again, so it usually finds
    the GIL free. Measured on two cores, 32 callers of single rows: 1.05-1.5x the requests per
    second of waking all at once, the more the costlier the host makes a context switch (bare
    wake-ups alone: 150-170k against 68-98k a second). Nobody is stranded: whoever adds to the
    ready queue wakes one caller, and every woken caller wakes one more.
    """

    __slots__ = ("_ready",)

    def __init__(self) -> None:
        self._ready: collections.deque = collections.deque()

    def post(self, requests: list) -> None:
        self._ready.extend(requests)
        self.wake_one()

    def wake_one(self) -> None:
        ready = self._ready
        while ready:
            try:
                req = ready.popleft()
            except IndexError:              # another thread took the last one
                return
            req.done.release()
            if not req.abandoned:           # an abandoned request wakes nobody: go on
                return


class _Batch:
    """Requests a worker runs in one forward pass: all of one feature shape."""

    __slots__ = ("requests", "rows", "key")

    def __init__(self, request: _Request):
        self.requests = [request]
        self.rows = request.rows
        self.key = request.key


_SHUTDOWN = None   # what a worker takes from the token queue to end


def _copy_for(exc: BaseException) -> BaseException:
    # every caller of a failed batch raises its own exception (one object raised in several
    # threads would collect all their tracebacks): the same type and message, chained to the
    # worker's original; DL4J's wrapping where the type cannot be rebuilt
    try:
        err = copy.copy(exc)
        err.__traceback__ = None
    except Exception:  # noqa: BLE001 - any type that cannot be copied gets the wrapper
        err = RuntimeError(f"Exception encountered while getting output: {exc}")
    err.__cause__ = exc
    return err


class ParallelInference(Stoppable):
    """Serve `model` to many threads at once (DL4J's ``ParallelInference``).

    Parameters
    ----------
    model : MultiLayerNetwork or ComputationGraph
        Initialised. Its parameters are copied once into a read-only snapshot that every
        replica shares; later training of `model` is not seen until `update_model`.
    inference_mode : InferenceMode or str
        BATCHED (default), SEQUENTIAL or INPLACE.
    workers : int
        Worker threads (SEQUENTIAL, BATCHED) or replicas (INPLACE), >= 1; a worker runs its
        kernels on ``max(1, ndws.get_num_threads() // workers)`` threads. Default 1, DL4J's
        on a CPU: the Python part of a forward pass holds the GIL, so for small requests one
        worker with every kernel thread serves more than several (measured in
        docs/parallel.md); more pay when requests are large enough to be mostly kernel time.
    batch_limit : int
        BATCHED: the most rows merged into one forward pass (DL4J's default 32).
    queue_limit : int
        The most batches (SEQUENTIAL: requests) waiting for a worker; a caller waits while the
        queue is full (DL4J's default 64).
    load_balance_mode : LoadBalanceMode or str
        INPLACE: FIFO (the first free replica) or ROUND_ROBIN.

    Examples
    --------
    >>> import numpy as np
    >>> from ndws.nn import MultiLayerConfiguration, MultiLayerNetwork, DenseLayer, OutputLayer
    >>> from ndws.parallel import ParallelInference
    >>> net = MultiLayerNetwork(MultiLayerConfiguration(
    ...     [DenseLayer(n_in=4, n_out=8, activation="relu"),
    ...      OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")], seed=0))
    >>> net.init()
    >>> x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    >>> with ParallelInference(net, workers=2) as pi:
    ...     out = pi.output(x)
    >>> out.shape, out.is_attached(), bool(np.allclose(out.numpy(), net.output(x).numpy()))
    ((5, 3), False, True)
    """

    def __init__(self, model: Any, inference_mode: Any = InferenceMode.BATCHED,
                 workers: int = 1, batch_limit: int = 32, queue_limit: int = 64,
                 load_balance_mode: Any = LoadBalanceMode.FIFO):
        check_model(model, "ParallelInference")
        self._mode = option_enum(InferenceMode, inference_mode, "inference_mode")
        self._workers = option_int(workers, "workers", 1, message="Workers should be "
                                   "positive value")
        self._batch_limit = option_int(batch_limit, "batch_limit", 1, message="Batch limit "
                                       "should be positive value")
        self._queue_limit = option_int(queue_limit, "queue_limit", 1, message="Queue limit "
                                       "should be positive value")
        self._load_balance = option_enum(LoadBalanceMode, load_balance_mode,
                                         "load_balance_mode")
        self._dtype = model.conf.dtype
        self._graph = hasattr(model.conf, "network_inputs")
        # each input's type (None: rows of any width), in the order requests give them
        self._input_types = ([model.conf.vertex_types.get(n) for n in model.conf.network_inputs]
                             if self._graph else [model.conf._network_input])
        # the layer reading each input: what one example of it is, and the embedding that
        # checks its indices before the cast to the model's dtype could round one
        self._readers = model._input_readers()
        self._replicas = self._snapshot(model, "ParallelInference")
        self._lock = threading.Lock()              # the queue and the closed flag
        self._queue: collections.deque = collections.deque()   # batches no worker has taken
        self._closed = False
        self._local = threading.local()            # each caller's reusable request
        self._relay = _Relay()
        if self._mode is InferenceMode.INPLACE:
            self._threads: list[threading.Thread] = []
            self._free: queue.SimpleQueue = queue.SimpleQueue()   # FIFO: free replicas
            for i in range(self._workers):
                self._free.put(i)
            self._slots = [threading.Lock() for _ in range(self._workers)]   # ROUND_ROBIN
            self._turn = itertools.count()
            return
        # tokens: one per batch enqueued (a worker takes one, then the oldest batch); room:
        # one per free place in the queue (a caller that makes a batch takes one)
        self._tokens: queue.SimpleQueue = queue.SimpleQueue()
        self._room: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(self._queue_limit):
            self._room.put(True)
        self._kernel_threads = max(1, ndws.get_num_threads() // self._workers)
        self._threads = [threading.Thread(target=self._work, args=(i,),
                                          name=f"InferenceThread-{i}", daemon=True)
                         for i in range(self._workers)]
        started = 0
        try:
            for t in self._threads:
                t.start()
                started += 1
        except BaseException:
            # e.g. no thread can be started: stop the ones running (each would wait for
            # requests for ever)
            self._threads = self._threads[:started]
            self.shutdown()
            raise

    # the options, read-only once built (the workers rely on them)
    inference_mode = property(lambda self: self._mode, doc="SEQUENTIAL, BATCHED or INPLACE.")
    workers = property(lambda self: self._workers, doc="Worker threads (INPLACE: replicas).")
    batch_limit = property(lambda self: self._batch_limit,
                           doc="BATCHED: the most rows in one forward pass.")
    queue_limit = property(lambda self: self._queue_limit,
                           doc="The most batches waiting for a worker.")
    load_balance_mode = property(lambda self: self._load_balance,
                                 doc="INPLACE: how a caller picks a replica.")

    _OPTIONS = ("inference_mode", "workers", "batch_limit", "queue_limit",
                "load_balance_mode")

    @classmethod
    def builder(cls, model: Any) -> Builder:
        """DL4J-style construction: ``ParallelInference.builder(net).inference_mode("BATCHED")
        .workers(2).batch_limit(32).build()``."""
        return Builder(cls, model)

    # -- the served network -------------------------------------------------------------------

    def _snapshot(self, model: Any, op: str) -> list:
        # one read-only copy of the parameters (detached), viewed by every replica's layers,
        # taken at an iteration boundary of the model (waiting for one while it trains)
        params = ndws.empty(model.num_params(), self._dtype, detached=True)
        model._copy_params_into(params, op)
        root = type(model)(model.conf)
        root._build(params, share=True)
        return [root] + [root._replica("all", stream=i) for i in range(1, self._workers)]

    def update_model(self, model: Any) -> None:
        """Serve `model` from now on: a new snapshot of its parameters, swapped in at once.
        Requests already queued are not lost: each runs on whichever model its worker holds
        when it takes the batch (never a mix of the two). While `model` trains in another
        thread the snapshot is taken at its next iteration boundary (this call waits for it);
        from one of its listeners, at iteration_done or an epoch hook."""
        check_model(model, "ParallelInference.update_model")
        self._check_open()
        if model.conf.dtype != self._dtype:
            raise ValueError(f"model: dtype {model.conf.dtype} differs from the served "
                             f"model's {self._dtype}")
        served = type(self._replicas[0])
        if type(model) is not served or (self._graph and (
                model.conf.network_inputs, model.conf.network_outputs) != (
                self._replicas[0].conf.network_inputs, self._replicas[0].conf.network_outputs)):
            raise ValueError(f"model: a {type(model).__name__} cannot replace the served "
                             f"{served.__name__}" + (" of other inputs or outputs"
                                                     if type(model) is served else "")
                             + " (the requests' arrays and answers would change meaning)")
        # one reference swap: atomic for readers
        self._replicas = self._snapshot(model, "ParallelInference.update_model")

    # -- requests -----------------------------------------------------------------------------

    def _request(self, inputs: tuple, blocking: bool) -> _Request:
        # the caller's inputs, one per input of the served network, each as a C-contiguous
        # array of the model's dtype (an NDArray's memory is read in place by a blocking call,
        # whose caller cannot close its workspace while it waits; a submitted one is copied,
        # as the caller goes on), all with one example or the same number of rows
        types = self._input_types
        if len(inputs) != len(types):
            raise ValueError(f"x: the served network has {len(types)} input"
                             f"{'s' if len(types) != 1 else ''}, got {len(inputs)} array"
                             f"{'s' if len(inputs) != 1 else ''}")
        arrays, vectors = [], set()
        for k, (x, t, reader) in enumerate(zip(inputs, types, self._readers)):
            name = "x" if len(types) == 1 else f"x[{k}]"
            arr, vector = self._one_input(x, t, reader, name, blocking)
            arrays.append(arr)
            vectors.add(vector)
        if len(vectors) > 1 or len({a.shape[0] for a in arrays}) > 1:
            raise ValueError("x: the inputs hold different numbers of examples: "
                             + ", ".join(str(a.shape[0]) for a in arrays)
                             + (" (and some one example without its batch axis)"
                                if len(vectors) > 1 else ""))
        if blocking:
            local = self._local
            req = getattr(local, "request", None)
            if req is None:
                if getattr(local, "worker", False):
                    raise RuntimeError("ParallelInference.output: called from one of its own "
                                       "worker threads (it would wait for itself)")
                req = local.request = _Request()
        else:
            req = _Request()
            req.future = Future()
        req.x, req.rows, req.vector = tuple(arrays), arrays[0].shape[0], vectors.pop()
        req.key = tuple(a.shape[1:] for a in arrays)
        return req

    def _one_input(self, x: Any, t: Any, reader: tuple, name: str, blocking: bool) -> tuple:
        # one input as (C-contiguous array of the model's dtype with a batch axis, whether it
        # was one example), against its input type `t` and its (layer, preprocessor) `reader`
        if isinstance(x, NDArray):
            arr = numbers(x if blocking or not x.is_attached() else x.numpy(), name)
        else:
            arr = numbers(x, name)
        accepts = getattr(reader[0], "accepts_input", None)
        indices = index_reader(*reader)
        if indices is not None:
            try:
                indices.check_indices(arr)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        # one example has the shape of the input's type (a row, an image), or for a layer that
        # reads other shapes (an EmbeddingSequenceLayer's (n, time) indices) what it takes
        # once given a batch axis
        if accepts is not None and (accepts(arr.shape) or accepts((1,) + arr.shape)):
            vector = not accepts(arr.shape)
        elif t is None or t.kind == "FF":
            vector = arr.ndim == 1
            if arr.ndim not in (1, 2):
                raise ValueError(f"{name}: expected one example (n_features,) or a batch "
                                 f"(n_samples, n_features), got shape {arr.shape}")
        elif t.is_example(arr.shape):
            vector = True
        elif arr.ndim and t.is_example(arr.shape[1:]):
            vector = False
        else:
            raise ValueError(f"{name}: expected one example {t.shape()} or a batch "
                             f"{t.describe_shape()} ({t!r}), got shape {arr.shape}")
        if vector:
            arr = arr.reshape((1,) + arr.shape)
        if arr.shape[0] == 0:
            raise ValueError(f"{name}: no examples (shape has 0 rows)")
        if arr.dtype != self._dtype or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr, dtype=self._dtype)
        return arr, vector

    def output(self, *x: Any) -> Any:
        """The network's output for `x` (one example, ``(n_features,)``, or a batch,
        ``(n_samples, n_features)``; for a network of images, one image or a batch of them):
        a detached array the caller may keep. A `ComputationGraph` takes one array per input
        (in `add_inputs` order, all with the same number of examples) and answers a list, one
        array per output. Safe to call from many threads at once; a failed forward pass raises
        its error in every caller of it."""
        req = self._request(x, True)
        if self._mode is InferenceMode.INPLACE:
            try:
                return self._inplace(req)
            finally:
                req.x = None              # the caller's input is not kept past its call
        try:
            self._enqueue(req)
            req.done.acquire()            # released by the relay once the result is ready
        except BaseException:
            # interrupted (or refused): the request may still be served later, so this
            # thread takes a fresh one next time, and the relay must not count on it
            self._local.request = None
            req.abandoned = True
            self._relay.wake_one()
            raise
        self._relay.wake_one()            # the baton: the next caller whose result is ready
        result, error = req.result, req.error
        req.result = req.error = None
        if error is not None:
            raise error
        return result

    def submit(self, *x: Any) -> Future:
        """Like `output`, without waiting: a ``concurrent.futures.Future`` of the result
        (``asyncio.wrap_future`` makes it awaitable). A future cancelled before a worker takes
        its batch is dropped from the batch."""
        req = self._request(x, False)
        fut = req.future
        assert fut is not None
        if self._mode is InferenceMode.INPLACE:
            self._check_open()
            fut.set_running_or_notify_cancel()
            try:
                fut.set_result(self._inplace(req))
            except Exception as exc:  # noqa: BLE001 - the future carries any failure
                fut.set_exception(exc)
            # a BaseException (SystemExit, KeyboardInterrupt, ...) is raised to the caller,
            # whose thread ran the pass, as output() would
            return fut
        self._enqueue(req)
        return fut

    def _enqueue(self, req: _Request) -> None:
        merge = self._mode is InferenceMode.BATCHED
        limit = self._batch_limit
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("ParallelInference: shut down; no further requests")
                if merge and self._queue:
                    last = self._queue[-1]
                    if last.key == req.key and last.rows + req.rows <= limit:
                        last.requests.append(req)
                        last.rows += req.rows
                        return
                try:
                    self._room.get_nowait()
                except queue.Empty:
                    pass
                else:
                    self._queue.append(_Batch(req))
                    self._tokens.put(True)
                    return
            self._room.get()             # the queue is full: wait for a place, then retry
            self._room.put(True)

    # -- the workers --------------------------------------------------------------------------

    def _take(self) -> _Batch | None:
        if self._tokens.get() is _SHUTDOWN:
            return None
        with self._lock:
            batch = self._queue.popleft()      # taken: nothing more is merged into it
        self._room.put(True)
        return batch

    def _work(self, i: int) -> None:
        self._local.worker = True
        staging: dict = {}
        try:
            with ndws.num_threads(self._kernel_threads):
                while True:
                    batch = self._take()
                    if batch is None:
                        return
                    self._run(self._replicas[i], batch, staging)
        finally:
            ndws.destroy_all_workspaces_for_current_thread()

    def _run(self, net: Any, batch: _Batch, staging: dict) -> None:
        # Whatever the batch raises goes to its callers, BaseExceptions too (a SystemExit in
        # a custom layer, ...): a worker that died would leave every later request waiting
        # for ever. The worker goes on with the next batch.
        reqs = [r for r in batch.requests
                if r.future is None or r.future.set_running_or_notify_cancel()]
        if not reqs:
            return
        rows = sum(r.rows for r in reqs)
        try:
            if len(reqs) == 1:
                xs = reqs[0].x
            else:
                # input by input: each caller's rows of input k copied into the staging
                # array of input k
                xs = []
                for k, key in enumerate(batch.key):
                    x = self._stage(staging, (k, key), rows)
                    np.concatenate([r.x[k] for r in reqs], out=x)
                    xs.append(x)
            outs = self._forward(net, xs)
            results, start = [], 0
            for r in reqs:
                end = start + r.rows
                mine = [o[start] if r.vector else o[start:end] for o in outs]
                results.append(mine if self._graph else mine[0])
                start = end
        except BaseException as exc:  # noqa: B036 - every caller of the batch gets the error
            self._finish(reqs, None, exc)
            return
        self._finish(reqs, results, None)

    def _finish(self, reqs: list, results: list | None, exc: BaseException | None) -> None:
        # each request's outcome; a submitted one's future runs its done-callbacks here, in
        # the worker (concurrent.futures logs an Exception they raise; a BaseException would
        # end the worker: logged the same way, and the other requests still get theirs)
        waiting = []
        for k, r in enumerate(reqs):
            try:
                if r.finish(None if results is None else results[k],
                            None if exc is None else _copy_for(exc)):
                    waiting.append(r)
            except BaseException:  # noqa: B036 - only a future's callback raises here
                log.exception("ParallelInference: a done-callback of a submitted request "
                              "raised (the request's future holds its result)")
        self._relay.post(waiting)

    def _stage(self, staging: dict, key: tuple, rows: int) -> np.ndarray:
        # the worker's array the batch's rows are copied into, one per (input, feature shape),
        # grown to the largest batch seen (so steady state allocates nothing)
        buf = staging.get(key)
        if buf is None or buf.shape[0] < rows:
            buf = staging[key] = np.empty((max(rows, self._batch_limit),) + key[1],
                                          self._dtype)
        return buf[:rows]

    def _forward(self, net: Any, xs: Any) -> list:
        # the served network's outputs for its inputs `xs`, as a list
        if self._graph:
            return net.output(*xs)
        return [net.output(xs[0])]

    def _inplace(self, req: _Request) -> Any:
        xs = req.x
        if self._load_balance is LoadBalanceMode.ROUND_ROBIN:
            i = next(self._turn) % self._workers
            with self._slots[i]:
                self._check_open()
                outs = self._forward(self._replicas[i], xs)
        else:
            i = self._free.get()
            try:
                self._check_open()
                outs = self._forward(self._replicas[i], xs)
            finally:
                self._free.put(i)
        outs = [o[0] if req.vector else o for o in outs]
        return outs if self._graph else outs[0]

    # -- ending -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ParallelInference: shut down; no further requests")

    def shutdown(self) -> None:
        """Refuse new requests, serve the ones already queued, and stop the workers (their
        workspaces are destroyed). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._tokens.put(_SHUTDOWN)
        if threading.current_thread() not in self._threads:
            for t in self._threads:
                t.join()

    def __repr__(self) -> str:
        return (f"<ParallelInference {self._workers} workers, {self._mode.name}, "
                f"{'shut down' if self._closed else 'open'}>")
