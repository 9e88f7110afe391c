"""`ParallelWrapper`: data-parallel training of one `MultiLayerNetwork` on worker threads
(DL4J's ``ParallelWrapper``), each worker in its own workspaces, really parallel because ndws'
kernels release the GIL (docs/parallel.md).

A fit deals the batches, one per worker per round, to `workers` threads named
``ParallelWrapper-worker-<i>``. Worker 0 trains the user's model object; the others train
replicas built from its configuration with copied parameters and updater state. The workers
meet at a barrier that waits without the GIL (``ndws.parallel._sync``), and between its
crossings each worker combines one fixed slice of the flat buffers, so the combining is
parallel too and its arithmetic (a fixed order of operands per element) never depends on
thread timing.

* AVERAGING: each worker fits its batch with its own updater; every `averaging_frequency`
  rounds (and at the end of each epoch) the parameters, and with `average_updaters` the updater
  state, of the workers that trained are averaged in place and copied to every worker.
* SHARED_GRADIENTS: one parameter set, shared by every worker's layers. Each round the workers
  compute their gradients, the gradients are combined weighted by rows (so two workers on b
  rows each give the gradient of one network on the 2b rows), and one update is applied.
  Parameters the updater does not change (BatchNormalization's running statistics) stay each
  worker's own and are averaged every round.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

import ndws
from ndws.data.async_iterators import _end_of_epoch, _prefetch_for_fit
from ndws.nn.history import History, _Epoch
from ndws.nn._busy import FREE, TRAIN
from ndws.nn.listeners import TrainingListener
from ndws.nn._model import count as _count
from ndws.parallel._sync import SpinBarrier
from ndws.parallel.modes import (Builder, Stoppable, TrainingMode, check_model,
                                 option_bool, option_enum, option_int)
from ndws.workspace import WorkspaceMode

__all__ = ["ParallelWrapper"]

log = logging.getLogger("ndws")

class _Signal:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_IDLE = _Signal("idle")        # a round without a batch for this worker (the last may be partial)
_END = _Signal("end")          # the epoch's batches are all dealt


class _Run:
    """The state one fit shares between its caller and its workers."""

    def __init__(self, nets: list, kernel_threads: int, slices: list, mode: TrainingMode,
                 stop: threading.Event):
        n = len(nets)
        self.nets = nets
        self.kernel_threads = kernel_threads
        self.slices = slices
        self.mode = mode
        self.stop = stop
        self.barrier = SpinBarrier(n)               # the rounds (no GIL while waiting)
        self.epochs = threading.Barrier(n + 1)      # the caller and the workers, per epoch
        self.finished = False                       # no further epoch (set by the caller)
        self.rows = [0] * n
        self.scores = [0.0] * n
        self.trained = [False] * n
        self.error: BaseException | None = None
        self.error_worker = -1
        self.history: History | None = None
        self.epoch: _Epoch | None = None        # the caller's frame of the running epoch
        # the dealer: the workers themselves take each round's batches from the source, under
        # a lock (no dealer thread to compete with them for the GIL)
        self.lock = threading.Lock()
        self.source: Any = None
        self.rounds: collections.deque = collections.deque()   # fetched, not yet all taken
        self.taken: collections.deque = collections.deque()
        self.first = 0                                          # the number of rounds[0]
        self.ended = False

    def new_epoch(self, source: Any) -> None:
        self.source, self.first, self.ended = source, 0, False
        self.rounds.clear()
        self.taken.clear()

    def take(self, worker: int, r: int) -> Any:
        """Worker `worker`'s item of round `r` of this epoch: its batch, _IDLE (a partial last
        round), or _END. The first worker to ask for a round fetches all of it; stop_fit
        ends the epoch before the next round is fetched, for every worker alike."""
        with self.lock:
            while r >= self.first + len(self.rounds):
                if self.ended or self.stop.is_set():
                    self.ended = True
                    return _END
                n = len(self.nets)
                got = []
                for _ in range(n):
                    try:
                        ds = next(self.source, None)
                    except BaseException as exc:   # the caller's data: not a worker's fault
                        self.ended = True
                        raise _DataError(exc) from None
                    if ds is None:
                        self.ended = True
                        break
                    got.append(ds)
                if not got:
                    return _END
                self.rounds.append(got + [_IDLE] * (n - len(got)))
                self.taken.append(0)
            k = r - self.first
            item = self.rounds[k][worker]
            self.taken[k] += 1
            while self.taken and self.taken[0] == len(self.nets):   # every worker has it
                self.rounds.popleft()
                self.taken.popleft()
                self.first += 1
            return item

    def fail(self, worker: int, exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error, self.error_worker = exc, worker
        self.barrier.abort()
        self.epochs.abort()


def _mean_into_all(arrays: list, members: list, a: int, b: int) -> None:
    # [a, b) of each worker's flat array: the mean over `members` (summed in index order, then
    # divided), written back to every worker's
    acc = arrays[members[0]][a:b]
    for k in members[1:]:
        ndws.add(acc, arrays[k][a:b], out=acc)
    if len(members) > 1:
        _scale_down(acc, len(members))
    for k, arr in enumerate(arrays):
        if k != members[0]:
            arr[a:b].assign(acc)


def _scale_down(acc: Any, n: int) -> None:
    # acc /= n in place. For a power of two, multiplying by 1/n gives the same bits and takes
    # 8 us instead of 20 for half of the MLP's flat buffer (a division per element is slow);
    # any other n divides, so the mean never depends on the worker count's rounding
    if n & (n - 1) == 0:
        ndws.multiply(acc, 1.0 / n, out=acc)
    else:
        ndws.divide(acc, n, out=acc)


class _DataError(Exception):
    """The batch source raised `exc` inside a worker's take (reported as the caller's)."""

    def __init__(self, exc: BaseException):
        super().__init__(exc)
        self.exc = exc


class _CallerFailed(Exception):
    """Marks a run stopped because the caller's side raised (its exception propagates)."""


class ParallelWrapper(Stoppable):
    """Train `model` on `workers` threads at once (DL4J's ``ParallelWrapper``).

    Parameters
    ----------
    model : MultiLayerNetwork
        Initialised. Worker 0 trains this object; it ends each fit with the combined
        parameters. Its listeners move to the wrapper (DL4J's ``build()``) and go back to it
        when the wrapper is closed.
    workers : int, optional
        Worker threads, at least 2 (DL4J's rule; one worker is plain ``model.fit``). Default:
        the kernel thread count, at least 2. Each worker runs its kernels on
        ``max(1, ndws.get_num_threads() // workers)`` threads, so the cores are never
        oversubscribed.
    prefetch_buffer : int
        Batches prefetched per worker by one async iterator (DL4J's default 16); 0 disables
        prefetching. An async-capable iterator is wrapped with a queue of
        ``max(prefetch_buffer, 4) * workers`` batches, so a batch stays valid (its ring has
        not come round) until its worker is done with it.
    averaging_frequency : int
        AVERAGING: average every this many rounds, >= 1.
    report_score_after_averaging : bool
        Log ``Averaged score: <s>`` (logger ``ndws``) at each averaging.
    average_updaters : bool
        AVERAGING: also average the updater state (e.g. Adam's moments).
    workspace_mode : WorkspaceMode or str
        The training workspace mode of every worker during fit (DL4J overrides the model's
        configuration; here the configuration is left as it is).
    training_mode : TrainingMode or str
        AVERAGING (default) or SHARED_GRADIENTS.

    Examples
    --------
    >>> import numpy as np
    >>> from ndws.nn import MultiLayerConfiguration, MultiLayerNetwork, DenseLayer, OutputLayer
    >>> from ndws.nn import Sgd
    >>> from ndws.parallel import ParallelWrapper, TrainingMode
    >>> conf = MultiLayerConfiguration(
    ...     [DenseLayer(n_in=4, n_out=8, activation="relu"),
    ...      OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")],
    ...     seed=0, updater=Sgd(0.1))
    >>> net = MultiLayerNetwork(conf); net.init()
    >>> rng = np.random.default_rng(0)
    >>> x = rng.random((64, 4), dtype=np.float32); y = rng.integers(0, 3, 64)
    >>> with ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS") as pw:
    ...     history = pw.fit(x, y, batch_size=16, epochs=2, progress=False)
    >>> len(history.iterations), net.iteration
    (4, 4)
    """

    def __init__(self, model: Any, workers: int | None = None, prefetch_buffer: int = 16,
                 averaging_frequency: int = 1, report_score_after_averaging: bool = False,
                 average_updaters: bool = True, workspace_mode: Any = WorkspaceMode.ENABLED,
                 training_mode: Any = TrainingMode.AVERAGING):
        check_model(model, "ParallelWrapper")
        if workers is None:
            workers = max(2, ndws.get_num_threads())
        self._workers = option_int(workers, "workers", 2,
                                   " (one worker is MultiLayerNetwork.fit)")
        self._prefetch_buffer = option_int(prefetch_buffer, "prefetch_buffer", 0)
        self._averaging_frequency = option_int(averaging_frequency, "averaging_frequency", 1)
        self._report_score_after_averaging = option_bool(report_score_after_averaging,
                                                         "report_score_after_averaging")
        self._average_updaters = option_bool(average_updaters, "average_updaters")
        self._workspace_mode = option_enum(WorkspaceMode, workspace_mode, "workspace_mode")
        self._training_mode = option_enum(TrainingMode, training_mode, "training_mode")
        self.model = model
        # DL4J's build(): the model's listeners become the wrapper's (not from under a fit in
        # another thread: the busy error)
        with model._exclusive("ParallelWrapper", FREE):
            self._listeners: list[TrainingListener] = model.get_listeners()
            model.set_listeners()
        self._busy = threading.Lock()
        self._stop_requested = threading.Event()
        self._closed = False
        self._idle = threading.Event()
        self._idle.set()
        self._fit_thread: int | None = None

    # the options, read-only once built (a running fit relies on them)
    workers = property(lambda self: self._workers, doc="Worker threads.")
    prefetch_buffer = property(lambda self: self._prefetch_buffer,
                               doc="Batches prefetched per worker (0: none).")
    averaging_frequency = property(lambda self: self._averaging_frequency,
                                   doc="AVERAGING: rounds between averagings.")
    report_score_after_averaging = property(lambda self: self._report_score_after_averaging,
                                            doc="Log the averaged score at each averaging.")
    average_updaters = property(lambda self: self._average_updaters,
                                doc="AVERAGING: average the updater state too.")
    workspace_mode = property(lambda self: self._workspace_mode,
                              doc="The workers' training workspace mode.")
    training_mode = property(lambda self: self._training_mode,
                             doc="AVERAGING or SHARED_GRADIENTS.")

    _OPTIONS = ("workers", "prefetch_buffer", "averaging_frequency",
                "report_score_after_averaging", "average_updaters", "workspace_mode",
                "training_mode")

    @classmethod
    def builder(cls, model: Any) -> Builder:
        """DL4J-style construction: ``ParallelWrapper.builder(net).workers(2)
        .training_mode("SHARED_GRADIENTS").build()``."""
        return Builder(cls, model)

    # -- listeners --------------------------------------------------------------------------

    def set_listeners(self, *listeners: TrainingListener) -> None:
        """Replace the listeners. Each worker calls them for its own network (a replica's
        iterations too); those with ``root_worker_only`` (CheckpointListener,
        EvaluativeListener) only for worker 0's, the user's model."""
        from ndws.nn._model import listener_list as _listener_list
        self._check_open()
        self._listeners = _listener_list(listeners)

    def add_listeners(self, *listeners: TrainingListener) -> None:
        from ndws.nn._model import listener_list as _listener_list
        self._check_open()
        self._listeners = self._listeners + _listener_list(listeners)

    def get_listeners(self) -> list[TrainingListener]:
        return list(self._listeners or ())

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ParallelWrapper: the wrapper is closed (its listeners went "
                               "back to the model)")

    # -- training ---------------------------------------------------------------------------

    def fit(self, data: Any, labels: Any = None, *, batch_size: int | None = None,
            epochs: int = 1, progress: bool | None = None) -> History:
        """Train on what `MultiLayerNetwork.fit` takes, `workers` batches per round; returns
        the `History` of the rounds (each round's combined score and rows)."""
        self._check_open()
        epochs = _count("epochs", epochs)
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("ParallelWrapper.fit: already fitting in another thread")
        root = self.model
        try:
            self._idle.clear()
            self._stop_requested.clear()
            self._fit_thread = threading.get_ident()
            with root._exclusive("ParallelWrapper.fit", TRAIN):
                return self._fit(data, labels, batch_size, epochs, progress)
        finally:
            self._fit_thread = None
            if self._closed:          # shut down from inside the fit (a listener)
                self._return_listeners()
            self._idle.set()
            self._busy.release()

    def _fit(self, data: Any, labels: Any, batch_size: Any, epochs: int,
             progress: bool | None) -> History:
        n = self.workers
        # a batch must outlive the ring's turn: up to 4 per worker are in flight (in its
        # hands, two queued, one being dealt)
        wrapper = None if self.prefetch_buffer <= 0 else _prefetch_for_fit(
            data, labels, queue_size=max(self.prefetch_buffer, 4) * n)
        if wrapper is not None:
            data = wrapper
        try:
            run = self._start(n)
        except BaseException:
            if wrapper is not None:
                wrapper.shutdown()
            raise
        history = run.history = History(epochs)
        try:
            for _ in range(epochs):
                if self._stop_requested.is_set():
                    break
                self._epoch(run, data, labels, batch_size, progress)
                _end_of_epoch(data, labels)
            run.finished = True
            run.epochs.wait()                 # the workers see `finished` and end
        except threading.BrokenBarrierError:
            pass                              # a worker failed: run.error says how
        except BaseException:
            run.fail(-1, _CallerFailed())     # e.g. a bad batch: stop the workers
            raise
        finally:
            for t in run.threads:
                t.join()
            if wrapper is not None:
                wrapper.shutdown()
            self._finish(run)
        if run.error is not None:
            self._raise(run)
        return history

    def _start(self, n: int) -> _Run:
        root = self.model
        shared = self.training_mode is TrainingMode.SHARED_GRADIENTS
        nets = [root] + [root._replica("trainable" if shared else "none", stream=i)
                         for i in range(1, n)]
        for i, net in enumerate(nets):
            net._workspace_override = self.workspace_mode
            net._listeners = [l for l in self._listeners
                              if i == 0 or not getattr(l, "root_worker_only", False)]
        total = root.num_params()
        # one slice of the flat buffers per worker, cut on 16-element boundaries
        cuts = [0] + [(total * i // n) & ~15 for i in range(1, n)] + [total]
        slices = list(zip(cuts[:-1], cuts[1:]))
        run = _Run(nets, max(1, ndws.get_num_threads() // n), slices, self.training_mode,
                   self._stop_requested)
        run.frozen = [(s, s + size) for layer, name, _, s, size in root._layout
                      if not layer.trainable(name)] if shared else []
        run.tmp = [ndws.empty(max(1, hi - lo), root.conf.dtype, detached=True)
                   for lo, hi in slices] if shared else None
        run.threads = [threading.Thread(target=self._work, args=(run, i),
                                        name=f"ParallelWrapper-worker-{i}", daemon=True)
                       for i in range(n)]
        started = []
        try:
            for t in run.threads:
                t.start()
                started.append(t)
        except BaseException:
            # e.g. no thread can be started: the ones running would wait for the others at
            # the epoch barrier for ever
            run.fail(-1, _CallerFailed())
            for t in started:
                t.join()
            self._finish(run)
            raise
        return run

    def _epoch(self, run: _Run, data: Any, labels: Any, batch_size: Any,
               progress: bool | None) -> None:
        # the caller's part of an epoch: frame it, let the workers run it, wait for its end
        root = self.model
        total = root._epoch_length(data, labels, batch_size)
        rounds = None if total is None else -(-total // self.workers)
        with _Epoch(root, self._listeners, run.history, rounds, progress, run.nets) as epoch:
            run.epoch = epoch
            run.new_epoch(iter(root._batches(data, labels, batch_size)))
            run.epochs.wait()                 # start
            run.epochs.wait()                 # every worker is done with the epoch

    # -- the workers ------------------------------------------------------------------------

    def _work(self, run: _Run, i: int) -> None:
        net = run.nets[i]
        rounds = 0          # since the last averaging: the same count in every worker
        # the workers act for the fit's caller: worker 0's listeners call back into the model
        # as its owner would (docs/networks.md, "Threads, listeners and snapshots"), and no
        # worker waits for a copy of the model that its own round holds up
        busy = run.nets[0]._busy
        busy.join_crew(i == 0)
        try:
            with ndws.num_threads(run.kernel_threads):
                while True:
                    run.epochs.wait()                   # an epoch starts, or the fit ends
                    if run.finished:
                        return
                    r = 0
                    while True:
                        waited = time.perf_counter()
                        item = run.take(i, r)
                        if item is _END:
                            break
                        r += 1
                        net.last_etl_time = (time.perf_counter() - waited) * 1000.0
                        if run.mode is TrainingMode.SHARED_GRADIENTS:
                            self._shared_round(run, i, item)
                            continue
                        self._averaging_round(run, i, item)
                        rounds += 1
                        if rounds == self.averaging_frequency:
                            self._average(run, i)
                            rounds = 0
                    if rounds:                          # each epoch ends averaged
                        self._average(run, i)
                        rounds = 0
                    run.epochs.wait()                   # the epoch's end
        except threading.BrokenBarrierError:
            pass          # a partner failed: its error is the one the caller gets
        except _DataError as err:
            run.fail(-1, err.exc)
        except BaseException as exc:  # noqa: B036 - every failure must reach fit's caller
            run.fail(i, exc)
        finally:
            busy.leave_crew()
            ndws.destroy_all_workspaces_for_current_thread()

    def _averaging_round(self, run: _Run, i: int, item: Any) -> None:
        net = run.nets[i]
        if item is _IDLE:
            return
        net._fit_batch(item)
        run.rows[i] = net.last_batch_size
        run.scores[i] = net._score
        run.trained[i] = True
        if i == 0:
            self._record(run, net._iteration - 1, net._score, net.last_batch_size)

    def _average(self, run: _Run, i: int) -> None:
        # every worker: wait for the others' rounds, average one slice, wait for the others'
        # slices (the next round reads every parameter). Worker 0 marks the model written
        # until all slices are (copies for other threads wait: ndws.nn._busy)
        root = run.nets[0]
        if i == 0:
            root._busy.begin()
        run.barrier.wait()
        members = [k for k in range(len(run.nets)) if run.trained[k]]
        lo, hi = run.slices[i]
        if members and lo < hi:
            _mean_into_all([net._params for net in run.nets], members, lo, hi)
            if self.average_updaters:
                # each updater segment [s, e) of the parameters has state arrays of its own
                for j, (_, s, e, state) in enumerate(run.nets[0]._segments):
                    a, b = max(s, lo), min(e, hi)
                    for m in range(len(state) if a < b else 0):
                        _mean_into_all([net._segments[j][3][m] for net in run.nets], members,
                                       a - s, b - s)
        if i == 0 and members:
            score = sum(run.scores[k] for k in members) / len(members)
            run.nets[0]._score = score
            if self.report_score_after_averaging:
                log.info("Averaged score: %s", score)
            if run.history.scores:
                run.history.scores[-1] = score
        run.barrier.wait()
        if i == 0:
            root._busy.end()
        run.trained[i] = False

    def _shared_round(self, run: _Run, i: int, item: Any) -> None:
        net = run.nets[i]
        root = run.nets[0]
        if i == 0:
            # the model's parameters are written from worker 0's forward pass (running
            # statistics) to the round's second barrier (every worker's slice)
            root._busy.begin()
        if item is not _IDLE:
            run.scores[i] = net._compute_step(item)        # the step's two halves: the
            run.rows[i] = net.last_batch_size              # network's own (nn._model)
            net._gradient_done()
        else:
            run.rows[i] = 0
        run.barrier.wait()
        rows = list(run.rows)
        total = sum(rows)
        lo, hi = run.slices[i]
        if lo < hi:
            # the combined gradient of this slice, in worker order: with equal batches
            # (g_0 + g_1 + ...) / n, else sum_k g_k * rows_k / total
            acc = root._grads[lo:hi]
            fed = [k for k, r in enumerate(rows) if r]
            if len(fed) > 1 and all(rows[k] == rows[fed[0]] for k in fed):
                for k in fed[1:]:
                    ndws.add(acc, run.nets[k]._grads[lo:hi], out=acc)
                _scale_down(acc, len(fed))
            elif len(fed) > 1:
                t = run.tmp[i][:hi - lo]
                ndws.multiply(acc, rows[0] / total, out=acc)
                for k in fed[1:]:
                    ndws.multiply(run.nets[k]._grads[lo:hi], rows[k] / total, out=t)
                    ndws.add(acc, t, out=acc)
            root._update(lo, hi)
            # parameters no updater changes (running statistics): each worker's own, averaged
            for s, e in run.frozen:
                a, b = max(s, lo), min(e, hi)
                if a < b:
                    _mean_into_all([net_k._params for net_k in run.nets], fed, a, b)
        run.barrier.wait()
        done = net._count_iteration()
        if i == 0:
            root._busy.end()
            root._score = sum(s * r for s, r in zip(run.scores, rows) if r) / total
            root.last_batch_size = total
            self._record(run, done, root._score, total)
        net._iteration_done(done)

    @staticmethod
    def _record(run: _Run, iteration: int, score: float, rows: int) -> None:
        run.epoch.iteration(iteration, score, rows)

    # -- ending -----------------------------------------------------------------------------

    def _finish(self, run: _Run) -> None:
        root = self.model
        root._workspace_override = None
        root._listeners = []
        for net in run.nets[1:]:
            net._listeners = []

    def _raise(self, run: _Run) -> None:
        exc = run.error
        assert exc is not None
        if run.error_worker >= 0 and hasattr(exc, "add_note"):
            exc.add_note(f"(raised in ParallelWrapper-worker-{run.error_worker})")
        raise exc

    def stop_fit(self) -> None:
        """Ask a running fit to stop (from any thread, a listener included): no round is dealt
        after this call, the rounds already dealt (at most two per worker after the current
        one) finish, and fit returns normally, the model holding the combined parameters."""
        self._stop_requested.set()

    def shutdown(self) -> None:
        """Stop a running fit, wait until its threads are gone, and close the wrapper: the
        listeners go back to the model; a later fit raises RuntimeError. Idempotent; from
        inside the fit (a listener) it asks the fit to stop and returns."""
        self.stop_fit()
        self._closed = True
        inside = (threading.get_ident() == self._fit_thread
                  or threading.current_thread().name.startswith("ParallelWrapper-worker-"))
        if inside:
            return                    # fit gives the listeners back as it ends
        self._idle.wait()
        self._return_listeners()

    def _return_listeners(self) -> None:
        if self._listeners is not None:
            self.model.set_listeners(*self._listeners)
            self._listeners = None

    def __repr__(self) -> str:
        return (f"<ParallelWrapper {self.workers} workers, {self.training_mode.name}, "
                f"{'closed' if self._closed else 'open'}>")
