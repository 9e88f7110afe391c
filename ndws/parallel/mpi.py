"""`MPITrainer`: data-parallel training of one `MultiLayerNetwork` over MPI, one process per
rank (mpi4py), the multi-process twin of `ParallelWrapper` (docs/distributed.md).

Every rank builds the same network and reads its own shard of the data (``shard(rank, size)``
of the iterators in `ndws.data`). At the start of each fit rank 0's parameters, updater state
and counters are broadcast, so every rank begins identical. Then each step:

* SHARED_GRADIENTS (default, DL4J's gradient sharing, exactly): each rank backpropagates its
  batch, weights its gradients by its share of the step's rows, and the flat gradient buffers
  (``net._grads``, every layer's gradients a view of it) are summed over the ranks, so the
  sum is the gradient of the concatenated batch and every rank applies the same update: N
  ranks on b rows each train like one process on the N*b rows (to float rounding). With every
  rank on one machine the sum goes through an MPI shared-memory window (`_SharedSum`); else it
  is MPI's in-place allreduce (zero-copy through the buffer protocol) in buckets of whole
  layers, each bucket's ``Iallreduce`` started from the network's backward hook as soon as
  backprop has written its layers (PyTorch DDP's scheme).
* AVERAGING: each rank fits its batches with its own updater; every `averaging_frequency`
  steps, and at the end of each epoch, the parameters (and the updater state) are averaged.

Every collective the trainer runs is waited for with an optional deadline (`timeout`), and an
exception on one rank ends the whole job with that rank's message (`MPI_Abort`) instead of
leaving the other ranks blocked in a collective forever. mpi4py and an MPI library are an
optional extra (``pip install 'ndws[mpi]'``): importing ndws never needs them.
"""
from __future__ import annotations

import hashlib
import logging
import math
import numbers
import sys
import time
import traceback
from typing import Any

import numpy as np

import ndws
from ndws.data.async_iterators import _end_of_epoch, _prefetch_for_fit
from ndws.data.dataset import DataSet
from ndws.nn._busy import FREE, TRAIN
from ndws.nn.history import History, _Epoch
from ndws.nn._model import count as _count
from ndws.parallel.modes import TrainingMode, check_model, option_bool, option_enum, option_int

__all__ = ["MPITrainer", "mpi_available"]

log = logging.getLogger("ndws")

INSTALL_HINT = ("pip install 'ndws[mpi]' (mpi4py and the mpich wheel from PyPI; no system MPI "
                "needed)")

#: default bucket size: layers are grouped, from the last one down, until a bucket holds at
#: least this many bytes (each allreduce has a fixed cost of a few microseconds)
DEFAULT_BUCKET_BYTES = 1 << 16


def _mpi() -> Any:
    """mpi4py's MPI module, or ImportError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(f"ndws.parallel.MPITrainer needs mpi4py and an MPI library: "
                          f"{INSTALL_HINT} ({exc})") from exc
    except (RuntimeError, OSError) as exc:        # mpi4py without a loadable MPI library
        raise ImportError(f"ndws.parallel.MPITrainer: mpi4py could not load an MPI library "
                          f"({exc}); {INSTALL_HINT}") from exc
    return MPI


def mpi_available() -> bool:
    """True when mpi4py and an MPI library can be imported (MPITrainer can be used)."""
    try:
        _mpi()
    except ImportError:
        return False
    return True


def _check_timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):       # NumPy's too
        raise TypeError(f"timeout: expected seconds (a number > 0) or None, got "
                        f"{type(value).__name__} {value!r:.40}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"timeout: expected a finite number of seconds > 0 or None, got "
                         f"{value!r}")
    return float(value)


def _check_comm(comm: Any, MPI: Any) -> Any:
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm: expected an mpi4py communicator (e.g. MPI.COMM_WORLD), got "
                        f"{type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise ValueError("comm: MPI.COMM_NULL is not a communicator of any process")
    if not isinstance(comm, MPI.Intracomm) or comm.Is_inter():
        raise TypeError("comm: expected an intracommunicator (one group of processes), got an "
                        "intercommunicator")
    return comm


class _Channel:
    """The trainer's collectives on one communicator: each non-blocking, waited for with the
    optional deadline (past it: a message naming the collective, then ``MPI_Abort``), and the
    time spent in MPI calls counted (`seconds`)."""

    def __init__(self, MPI: Any, comm: Any, timeout: float | None, context: Any):
        self.MPI = MPI
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout = timeout
        self.context = context          # () -> str: where the job is, for messages
        self.seconds = 0.0

    def abort(self, message: str, exc: BaseException | None = None) -> None:
        """Report on stderr with this rank, then end every process of the job."""
        lines = [f"ndws MPITrainer: rank {self.rank} of {self.size} {message}"
                 f"{self.context()}\n"]
        if exc is not None:
            lines += traceback.format_exception(type(exc), exc, exc.__traceback__)
        lines.append(f"ndws MPITrainer: rank {self.rank} aborts the job (MPI_Abort), so no "
                     f"rank waits forever in a collective\n")
        try:
            sys.stderr.write("".join(lines))
            sys.stderr.flush()
        finally:
            self.comm.Abort(1)

    def wait(self, request: Any, what: str) -> None:
        """Wait for `request`; past `timeout` seconds report `what` and abort the job."""
        t0 = time.perf_counter()
        if self.timeout is None:
            request.Wait()
        else:
            deadline = t0 + self.timeout
            while not request.Test():
                if time.perf_counter() > deadline:
                    self.abort(f"waited more than {self.timeout:g} s for {what}; another "
                               f"rank is stuck, has died, or failed outside the trainer")
        self.seconds += time.perf_counter() - t0

    def iallreduce(self, buf: Any, op: Any = None) -> Any:
        """Start the in-place allreduce of `buf` (a sum by default); returns its request."""
        t0 = time.perf_counter()
        request = self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op or self.MPI.SUM)
        self.seconds += time.perf_counter() - t0
        return request

    def allreduce(self, buf: Any, what: str, op: Any = None) -> None:
        self.wait(self.iallreduce(buf, op), what)

    def bcast(self, buf: Any, what: str) -> None:
        t0 = time.perf_counter()
        request = self.comm.Ibcast(buf, root=0)
        self.seconds += time.perf_counter() - t0
        self.wait(request, what)

    def bcast_text(self, text: str | None, what: str) -> str:
        """Rank 0's `text` on every rank (its length, then its bytes)."""
        data = (text or "").encode() if self.rank == 0 else b""
        n = np.array([len(data)], np.int64)
        self.bcast(n, what)
        buf = (np.frombuffer(data, np.uint8).copy() if self.rank == 0
               else np.empty(int(n[0]), np.uint8))
        if n[0]:
            self.bcast(buf, what)
        return buf.tobytes().decode()

    def agree(self, error: BaseException | None, where: str, fingerprint: int) -> None:
        """Every rank raises if any rank's local checks failed (that rank its own error, the
        others a RuntimeError naming it and why) or if the ranks' fingerprints of the network
        configuration and options differ; else every rank returns."""
        flags = np.array([error is not None, fingerprint, -fingerprint], np.int64)
        self.allreduce(flags, f"the ranks' agreement on the arguments of {where}",
                       self.MPI.MAX)
        if flags[0]:
            messages = self.comm.allgather(None if error is None else
                                           f"{type(error).__name__}: {error}")
            if error is not None:
                raise error
            bad = next(r for r, m in enumerate(messages) if m is not None)
            raise RuntimeError(f"{where}: rank {bad} of {self.size} refused its arguments: "
                               f"{messages[bad]}")
        if flags[1] != -flags[2]:
            raise ValueError(f"{where}: the ranks' networks or options differ (every rank "
                             f"must build the same network configuration and give the "
                             f"trainer the same options)")


class _SharedSum:
    """The in-place sum of one flat array over the ranks of one machine through an MPI
    shared-memory window: each rank copies its array into its segment, sums its slice of every
    segment into its own (each slice is summed by one rank, so every rank gets the same bits),
    then copies every slice's sum out of the segment that holds it. Barriers between the phases (with the trainer's deadline); the window is in a passive
    lock epoch for its life, and `Sync` orders the memory around each barrier."""

    def __init__(self, node: Any, n: int, dtype: Any):
        self.node = node
        self.rank, self.size = node.Get_rank(), node.Get_size()
        itemsize = np.dtype(dtype).itemsize
        self.win = _mpi().Win.Allocate_shared(max(n, 1) * itemsize, itemsize, comm=node)
        self.segments = []
        for j in range(self.size):
            buf, _ = self.win.Shared_query(j)
            self.segments.append(np.frombuffer(buf, dtype, count=n))
        self.cuts = [n * j // self.size for j in range(self.size + 1)]
        self.win.Lock_all(_mpi().MODE_NOCHECK)

    def _barrier(self, ch: _Channel, what: str) -> None:
        self.win.Sync()
        ch.wait(self.node.Ibarrier(), what)
        self.win.Sync()

    def sum(self, array: np.ndarray, weight: float, ch: _Channel) -> None:
        """`array` := the sum over the machine's ranks of weight * array."""
        mine = self.segments[self.rank]
        # the segments are free once every rank has copied the last sums out
        self._barrier(ch, "the shared-memory barrier before the gradients are copied in")
        if weight != 1.0:
            np.multiply(array, weight, out=mine)       # weighted as it is copied in
        else:
            np.copyto(mine, array)
        self._barrier(ch, "the shared-memory barrier after the gradients are copied in")
        lo, hi = self.cuts[self.rank], self.cuts[self.rank + 1]
        part = mine[lo:hi]
        for j, segment in enumerate(self.segments):
            if j != self.rank:
                np.add(part, segment[lo:hi], out=part)
        self._barrier(ch, "the shared-memory barrier after the slices are summed")
        for j, segment in enumerate(self.segments):
            a, b = self.cuts[j], self.cuts[j + 1]
            array[a:b] = segment[a:b]

    def free(self) -> None:
        self.win.Unlock_all()
        self.win.Free()
        self.node.Free()


class MPITrainer:
    """Train `model` data-parallel on the processes of `comm`, one per rank (the multi-process
    twin of `ParallelWrapper`; DL4J trains on several machines through Spark).

    Construction is collective: every rank of `comm` builds a trainer with the same options
    around the same network configuration (checked), then calls `fit` with its own shard of
    the data.

    Parameters
    ----------
    model : MultiLayerNetwork
        Initialised, of the same configuration on every rank. Construction and each `fit`
        start from rank 0's parameters, updater state and counters, broadcast to the others.
    comm : mpi4py.MPI.Intracomm, optional
        The processes to train on (default ``MPI.COMM_WORLD``). The trainer works on its own
        duplicate of it, so its collectives never mix with the caller's.
    training_mode : TrainingMode or str
        SHARED_GRADIENTS (default): the gradients are summed over the ranks every step,
        weighted by rows, and every rank applies the same update. AVERAGING: each rank updates
        on its own; the parameters are averaged every `averaging_frequency` steps and at the
        end of each epoch.
    averaging_frequency : int
        AVERAGING: steps between averagings, >= 1.
    average_updaters : bool
        AVERAGING: average the updater state (e.g. Adam's moments) too.
    report_score_after_averaging : bool
        AVERAGING: log ``Averaged score: <s>`` (logger ``ndws``, rank 0) at each averaging.
    overlap : bool
        SHARED_GRADIENTS: start each bucket's allreduce during backprop (True, default), or
        allreduce the whole gradient buffer in one blocking call after it (False).
    bucket_bytes : int
        With `overlap`: layers are grouped, from the last one down, into buckets of at least
        this many bytes (0: one bucket per layer with parameters).
    shared_memory : bool, optional
        SHARED_GRADIENTS with every rank on one machine: sum the gradients through an MPI
        shared-memory window instead of MPI's allreduce (each rank copies its gradients in,
        sums its slice of everyone's, copies the sums out; about half the time of MPICH's
        allreduce here, docs/distributed.md). Default None: when every rank is on one
        machine; True: the same, and an error when the ranks span machines; False: never.
    timeout : float, optional
        Seconds any one collective may take before the job is aborted with a message naming
        it (default None: no limit). Allow for the slowest step and for what rank 0's
        listeners do (checkpoints, evaluations) while the others wait.
    abort_on_error : bool
        An exception inside `fit` on one rank is reported on stderr with the rank and the job
        is ended with ``MPI_Abort`` (True, default), so no other rank waits forever in a
        collective; with False it propagates (the other ranks then rely on `timeout`). With
        one process it always propagates.
    kernel_threads : int, optional
        Kernel threads of this rank during `fit`. Default: ``ndws.get_num_threads()`` divided
        among the ranks on this machine (at least 1), so ranks sharing a machine never
        oversubscribe its cores (as `ParallelWrapper`'s workers).
    trace : bool
        SHARED_GRADIENTS: record each step's events (each layer's backprop, each bucket's
        allreduce started and completed) for `timeline` (a few microseconds a step).

    Examples
    --------
    ``train.py``, run as ``mpiexec -n 2 python -m mpi4py train.py`` (docs/distributed.md)::

        trainer = MPITrainer(net)
        it = ArrayDataSetIterator(x, y, 32, shuffle=True, seed=0)
        trainer.fit(it.shard(trainer.rank, trainer.size), epochs=5)
    """

    def __init__(self, model: Any, comm: Any = None,
                 training_mode: Any = TrainingMode.SHARED_GRADIENTS,
                 averaging_frequency: int = 1, average_updaters: bool = True, *,
                 report_score_after_averaging: bool = False, overlap: bool = True,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, shared_memory: bool | None = None,
                 timeout: float | None = None,
                 abort_on_error: bool = True, kernel_threads: int | None = None,
                 trace: bool = False):
        MPI = _mpi()
        comm = _check_comm(comm, MPI)
        self._closed = True             # until constructed: nothing to free
        self.model = model
        self._user_comm = comm
        # local checks first; then every rank learns whether any rank refused, so none goes
        # on into a collective that the refusing rank will never join
        error: BaseException | None = None
        try:
            self._timeout = _check_timeout(timeout)
        except (TypeError, ValueError) as exc:
            error, self._timeout = exc, None
        self._ch = _Channel(MPI, comm, self._timeout, self._context)
        claimed = False
        try:
            if error is not None:
                raise error
            check_model(model, "MPITrainer")
            # the broadcast at the end writes the model: not under a fit in another thread
            claim = model._exclusive("MPITrainer", FREE, writes=True)
            claim.__enter__()                  # busy in another thread: RuntimeError
            claimed = True
            self._training_mode = option_enum(TrainingMode, training_mode, "training_mode")
            self._averaging_frequency = option_int(averaging_frequency, "averaging_frequency",
                                                   1)
            self._average_updaters = option_bool(average_updaters, "average_updaters")
            self._report_score_after_averaging = option_bool(report_score_after_averaging,
                                                             "report_score_after_averaging")
            self._overlap = option_bool(overlap, "overlap")
            if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes,
                                                                numbers.Integral):
                raise TypeError(f"bucket_bytes: expected an int >= 0, got "
                                f"{type(bucket_bytes).__name__}")
            if bucket_bytes < 0:
                raise ValueError(f"bucket_bytes: must be at least 0, got {bucket_bytes}")
            self._bucket_bytes = int(bucket_bytes)
            self._shared_memory = (None if shared_memory is None else
                                   option_bool(shared_memory, "shared_memory"))
            self._abort_on_error = option_bool(abort_on_error, "abort_on_error")
            self._trace = option_bool(trace, "trace")
            self._kernel_threads = (None if kernel_threads is None else
                                    option_int(kernel_threads, "kernel_threads", 1))
        except (TypeError, ValueError, RuntimeError) as exc:
            error = exc
        try:
            self._ch.agree(error, "MPITrainer", 0 if error is not None else self._fingerprint())
            # from here on the trainer's own communication context
            self._ch = _Channel(MPI, comm.Dup(), self._timeout, self._context)
            self._closed = False
            self._rank, self._size = self._ch.rank, self._ch.size
            # the ranks on this machine: they share its cores, and may share memory
            node = self._ch.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self._rank)
            here = node.Get_size()
            if self._kernel_threads is None:
                self._kernel_threads = max(1, ndws.get_num_threads() // here)
            one_machine = here == self._size
            self._shm: _SharedSum | None = None
            if (self._shared_memory is not False and one_machine and self._size > 1
                    and self._training_mode is TrainingMode.SHARED_GRADIENTS):
                self._shm = _SharedSum(node, model.num_params(), model.conf.dtype)
            else:
                node.Free()
            if self._shared_memory and not one_machine:
                self.close()
                raise ValueError(f"shared_memory=True: the {self._size} ranks span more "
                                 f"than one machine (this one has {here}); use the "
                                 f"default (None) or False")
            self._events: list = []
            self._last_events: list = []
            self._buckets: list = []
            self._broadcast_state()
        finally:
            if claimed:
                claim.__exit__(sys.exc_info()[0], None, None)

    # -- read-only options ------------------------------------------------------------------

    rank = property(lambda self: self._rank, doc="This process's rank in `comm`.")
    size = property(lambda self: self._size, doc="The number of processes (ranks).")
    comm = property(lambda self: self._user_comm,
                    doc="The communicator given (the trainer works on a duplicate of it).")
    is_root = property(lambda self: self._rank == 0,
                       doc="True on rank 0, which reports, checkpoints and is broadcast from.")
    training_mode = property(lambda self: self._training_mode,
                             doc="SHARED_GRADIENTS or AVERAGING.")
    averaging_frequency = property(lambda self: self._averaging_frequency,
                                   doc="AVERAGING: steps between averagings.")
    average_updaters = property(lambda self: self._average_updaters,
                                doc="AVERAGING: average the updater state too.")
    report_score_after_averaging = property(lambda self: self._report_score_after_averaging,
                                            doc="AVERAGING: log the averaged score.")
    overlap = property(lambda self: self._overlap,
                       doc="SHARED_GRADIENTS: allreduce the buckets during backprop.")
    bucket_bytes = property(lambda self: self._bucket_bytes,
                            doc="The least bytes of a bucket (0: one per layer).")
    timeout = property(lambda self: self._timeout,
                       doc="Seconds a collective may take before the job is aborted (None: "
                           "no limit).")
    shared_memory = property(lambda self: self._shm is not None,
                             doc="True when the gradients are summed in shared memory.")
    abort_on_error = property(lambda self: self._abort_on_error,
                              doc="End the job with MPI_Abort when a rank fails in fit.")
    kernel_threads = property(lambda self: self._kernel_threads,
                              doc="Kernel threads of this rank during fit.")

    def __repr__(self) -> str:
        return (f"<MPITrainer rank {self._rank} of {self._size}, {self._training_mode.name}, "
                f"{'closed' if self._closed else 'open'}>")

    def _context(self) -> str:
        net = self.model
        it = getattr(net, "_iteration", None)
        return (f" (at iteration {it}, epoch {net._epoch})" if isinstance(it, int) else "")

    def _fingerprint(self) -> int:
        # the configuration and every option that shapes the collectives: ranks that differ
        # would start different collectives, or the same ones on different buffers
        net = self.model
        text = "|".join([net.conf.to_json(), str(net.num_params()), self._training_mode.name,
                         str(self._averaging_frequency), str(self._average_updaters),
                         str(self._overlap), str(self._bucket_bytes),
                         str(self._shared_memory)])
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")

    # -- state ----------------------------------------------------------------------------------

    def _broadcast_state(self) -> None:
        """Rank 0's parameters, updater state, counters and score on every rank (zero-copy:
        the flat buffers themselves are broadcast into); the other ranks' dropout streams
        are their own (from the seed, the rank and the iteration)."""
        net, ch = self.model, self._ch
        ch.bcast(np.asarray(net._params), "the broadcast of rank 0's parameters")
        for _, _, _, state in net._segments:
            for arr in state:
                ch.bcast(np.asarray(arr), "the broadcast of rank 0's updater state")
        counters = np.array([net.iteration, net.epoch], np.int64)
        ch.bcast(counters, "the broadcast of rank 0's counters")
        score = np.array([net.score()], np.float64)
        ch.bcast(score, "the broadcast of rank 0's score")
        net.iteration, net.epoch = int(counters[0]), int(counters[1])
        net._score = float(score[0])
        if self._rank:
            rng = np.random.default_rng([net.conf.seed, 1, self._rank, net.iteration])
            net._dropout_rng = rng
            for layer in net._owners():
                layer._rng = rng

    def _plan_buckets(self) -> None:
        """The buckets of the flat gradient buffer: runs of whole layers (a graph's layers and
        vertices) in the order the backward pass finishes them, each closed once it holds
        `bucket_bytes` (the rest in the last one), each with the owner whose gradients
        complete it (the last one the backward pass reaches). A bucket is one contiguous
        slice of the buffer (MPI reduces it in place): an owner whose parameters do not
        continue the bucket being filled (a layout in another order than the backward pass)
        starts a new one."""
        net = self.model
        itemsize = net.conf.dtype.itemsize
        total = net.num_params()
        buckets: list[tuple[int, int, int]] = []
        if not self._overlap or self._shm is not None or not net._layer_hook:
            buckets = [(0, 0, total)] if total else []
        else:
            index = {id(owner): k for k, owner in enumerate(net._owners())}
            spans: dict[int, list[int]] = {}
            for owner, _, _, start, size in net._layout:
                span = spans.setdefault(index[id(owner)], [start, start])
                span[1] = start + size
            lo = hi = last = None
            for i in net._backward_order():
                s, e = spans.get(i, (0, 0))
                if e == s:
                    continue
                if lo is not None and e != lo:
                    buckets.append((last, lo, hi))
                    lo = hi = None
                hi = e if hi is None else hi
                lo, last = s, i
                if (hi - lo) * itemsize >= self._bucket_bytes:
                    buckets.append((i, lo, hi))
                    lo = hi = None
            if lo is not None:
                buckets.append((last, lo, hi))
        grads = np.asarray(net._grads)          # zero-copy: MPI reads and writes the buffer
        self._buckets = buckets
        self._bucket_views = [grads[s:e] for _, s, e in buckets]
        self._trigger = {i: k for k, (i, _, _) in enumerate(buckets)}
        # parameters no updater changes (running statistics): averaged after each step
        self._frozen = [(s, s + size) for layer, name, _, s, size in net._layout
                        if not layer.trainable(name) and size]

    # -- the step's hook ----------------------------------------------------------------------

    def _event(self, kind: str, index: int) -> None:
        self._events.append(((time.perf_counter() - self._t_step) * 1e6, kind, index))

    def _post_bucket(self, k: int) -> None:
        if self._weight != 1.0:
            # in place on the NumPy view (zero-copy; a scalar multiply is memory-bound, and
            # NumPy's has the least per-call cost)
            self._bucket_views[k] *= self._weight
        self._requests[k] = self._ch.iallreduce(self._bucket_views[k])
        self._posted = k + 1
        if self._trace:
            self._event("allreduce started", k)

    def _progress(self) -> None:
        # MPICH moves a non-blocking collective on only inside MPI calls: a test between two
        # layers lets the buckets already started progress (and tells which are done)
        t0 = time.perf_counter()
        for k in range(self._posted):
            if not self._done[k] and self._requests[k].Test():
                self._done[k] = True
                if self._trace:
                    self._event("allreduce done", k)
        self._ch.seconds += time.perf_counter() - t0

    def _after_layer(self, i: int) -> None:
        # the network calls this right after layer i's gradients are in the flat buffer (i: an
        # index of its _owners(), a graph's layers and vertices in the layout's order)
        if self._trace:
            self._event("backprop done", i)
        if self._info_request is not None:
            self._finish_info()
        self._progress()
        k = self._trigger.get(i)
        if k is not None and k == self._posted:
            self._post_bucket(k)

    def _finish_info(self) -> None:
        # the step's row counts, summed over the ranks: this rank's gradient weighs its rows
        # over the total
        self._ch.wait(self._info_request, "the step's row counts")
        self._info_request = None
        self._total_rows = int(self._info[0])
        self._weight = self._rows / self._total_rows if self._total_rows else 0.0

    # -- training -------------------------------------------------------------------------------

    def fit(self, data: Any, labels: Any = None, *, batch_size: int | None = None,
            epochs: int = 1, progress: bool | None = None) -> History:
        """Train on this rank's data: what `MultiLayerNetwork.fit` takes, usually this rank's
        shard (``iterator.shard(trainer.rank, trainer.size)``). Collective.

        Returns the `History` of the steps (each step's score over all ranks and its global
        rows), the same on every rank. The progress bar and the model's listeners run on
        rank 0 only. A step runs while any rank has a batch: a rank without one (or with a
        batch of 0 rows) contributes nothing to it, so ranks with uneven data never wait
        forever."""
        self._check_open()
        net = self.model
        error: BaseException | None = None
        lock = net._exclusive("MPITrainer.fit", TRAIN)
        locked = False
        try:
            epochs = _count("epochs", epochs)
            if progress is not None and not isinstance(progress, bool):
                raise TypeError(f"progress: expected True, False or None, got "
                                f"{progress!r:.40}")
            if net._params is None:
                raise ValueError("MPITrainer.fit: the model is not initialised")
            # what MultiLayerNetwork.fit checks as it starts reading, checked here, before
            # the ranks agree (inside the training a bad argument would end the job)
            if labels is not None and batch_size is not None:
                batch_size = _count("batch_size", batch_size)
            if labels is None and batch_size is not None:
                raise ValueError("batch_size: only with features and labels arrays (a DataSet "
                                 "or an iterator brings its own batches)")
            if labels is None and not isinstance(data, DataSet) and not hasattr(data,
                                                                                  "__iter__"):
                raise TypeError(f"data: expected a DataSet, an iterable of DataSets or "
                                f"arrays, got {type(data).__name__}")
            lock.__enter__()                   # busy in another thread: RuntimeError
            locked = True
        except (TypeError, ValueError, RuntimeError) as exc:
            error = exc
        try:
            self._ch.agree(error, "MPITrainer.fit",
                           0 if error is not None else self._fingerprint())
            listeners = net._listeners
            try:
                net._busy.begin()              # copies for other threads wait for it
                self._broadcast_state()
                net._busy.end()
                self._plan_buckets()
                if self._rank:
                    net._listeners = []            # listeners report on rank 0 only
                with ndws.num_threads(self._kernel_threads):
                    return self._fit(data, labels, batch_size, epochs,
                                     progress if self._rank == 0 else False)
            except BaseException as exc:
                self._fail(exc)
                raise
            finally:
                net._listeners = listeners
                net._after_layer_gradients = None
                net.__dict__.pop("last_comm_time", None)
        finally:
            if locked:
                lock.__exit__(sys.exc_info()[0], None, None)

    def _fail(self, exc: BaseException) -> None:
        # an exception inside fit: with several ranks the others are, or will be, blocked in a
        # collective this rank will never join
        if self._size > 1 and self._abort_on_error:
            self._ch.abort(f"failed: {type(exc).__name__}: {exc}", exc)

    def _fit(self, data: Any, labels: Any, batch_size: Any, epochs: int,
             progress: bool | None) -> History:
        net = self.model
        history = History(epochs)
        # as MultiLayerNetwork.fit: an iterator with loading to hide is prefetched (queue 2)
        wrapper = _prefetch_for_fit(data, labels, queue_size=2)
        if wrapper is not None:
            data = wrapper
        shared = self._training_mode is TrainingMode.SHARED_GRADIENTS
        self._hooked = shared and self._overlap and self._shm is None
        if self._hooked:
            net._after_layer_gradients = self._after_layer
        self._since_average = 0
        self._trained = False
        try:
            for _ in range(epochs):
                self._epoch(data, labels, batch_size, progress, history, shared)
        finally:
            if wrapper is not None:
                wrapper.shutdown()
        return history

    def _epoch(self, data: Any, labels: Any, batch_size: Any, progress: bool | None,
               history: History, shared: bool) -> None:
        net = self.model
        with _Epoch(net, net._listeners, history, net._epoch_length(data, labels, batch_size),
                    progress) as epoch:
            batches = iter(net._batches(data, labels, batch_size))
            while True:
                waited = time.perf_counter()
                ds = next(batches, None)
                net.last_etl_time = (time.perf_counter() - waited) * 1000.0
                # the step writes the model until _end_step (copies for other threads wait)
                net._busy.begin()
                step = self._shared_step(ds) if shared else self._averaging_step(ds)
                if step is None:
                    net._busy.end()
                    break                      # no rank had a batch: the epoch is over
                epoch.iteration(*step)
        _end_of_epoch(data, labels)

    def _start_step(self, ds: DataSet | None) -> None:
        # the step's counts, summed over the ranks and started without waiting: rows, ranks
        # with a batch, ranks with rows, ranks that trained since the last averaging
        self._t_step = time.perf_counter()
        self._ch.seconds = 0.0
        self._events = []
        rows = 0 if ds is None else ds.num_examples()     # a MultiDataSet too
        self._rows = rows
        self._weight = 1.0
        self._info = np.array([rows, ds is not None, rows > 0, self._trained or rows > 0],
                              np.int64)
        self._info_request = self._ch.iallreduce(self._info)

    def _shared_step(self, ds: DataSet | None) -> tuple | None:
        net, ch = self.model, self._ch
        n = len(self._buckets)
        self._requests: list = [None] * n
        self._done = [False] * n
        self._posted = 0
        self._start_step(ds)
        score = 0.0
        if self._rows:
            # backprop; with overlap the hook weights and starts each bucket as soon as its
            # layers are done
            score = net._compute_step(ds)
        if self._info_request is not None:
            self._finish_info()
        if self._info[1] == 0:
            return None                        # no rank has a batch: the epoch is over
        if self._total_rows == 0:
            net.last_batch_size = 0            # only empty batches: nothing to learn from
            return self._end_step()
        if not self._rows:
            net._grads.fill(0)                 # this rank contributes nothing
            self._weight = 1.0
        if self._hooked:
            while self._posted < n:            # what backprop has not started (no rows)
                self._post_bucket(self._posted)
        elif n:
            if self._weight != 1.0 and self._shm is None:
                self._bucket_views[0] *= self._weight
            if self._trace:
                self._event("allreduce started", 0)
            if self._shm is not None:
                t0, waited = time.perf_counter(), ch.seconds
                self._shm.sum(self._bucket_views[0], self._weight, ch)
                ch.seconds = waited + time.perf_counter() - t0     # copies and sums count
            elif self._timeout is None:
                # the single blocking call the buckets are measured against
                t0 = time.perf_counter()
                ch.comm.Allreduce(ch.MPI.IN_PLACE, self._bucket_views[0], ch.MPI.SUM)
                ch.seconds += time.perf_counter() - t0
            else:
                ch.wait(ch.iallreduce(self._bucket_views[0]),
                        "the allreduce of the gradients")
            self._done[0] = True
            self._posted = 1
            if self._trace:
                self._event("allreduce waited", 0)
        # the step's score over the ranks, weighted by rows (the regularisation terms, the same
        # on every rank, come out as they are)
        scores = np.array([score * self._weight if self._rows else 0.0], np.float64)
        score_request = ch.iallreduce(scores)
        for k in range(n):
            if not self._done[k]:
                ch.wait(self._requests[k], f"the allreduce of gradient bucket {k} of {n}")
                self._done[k] = True
                if self._trace:
                    self._event("allreduce waited", k)
        ch.wait(score_request, "the allreduce of the step's score")
        net._score = float(scores[0])
        net.last_batch_size = self._total_rows
        net._gradient_done()                               # the combined gradient
        net._update(0, net.num_params())
        if self._frozen:
            self._average_frozen()
        if self._trace:
            self._event("updated", 0)
            self._last_events = self._events
        return self._end_step()

    def _average_frozen(self) -> None:
        # parameters no updater changes (running statistics) went their own way on each rank:
        # their mean over the ranks that had rows this step
        net = self.model
        w = 1.0 / int(self._info[2]) if self._rows else 0.0
        params = np.asarray(net._params)
        for s, e in self._frozen:
            view = params[s:e]
            view *= w
            self._ch.allreduce(view, "the allreduce of the running statistics")

    def _end_step(self) -> tuple:
        net = self.model
        done = net._count_iteration()
        net._busy.end()                                    # the boundary
        net.last_comm_time = self._ch.seconds * 1000.0     # PerformanceListener shows it
        net._iteration_done(done)
        return done, net._score, net.last_batch_size

    def _averaging_step(self, ds: DataSet | None) -> tuple | None:
        net = self.model
        self._start_step(ds)
        score = 0.0
        if self._rows:
            # this rank's own step, with its own updater, while the counts travel
            score = net._compute_step(ds)
            net._gradient_done()
            net._update(0, net.num_params())
            self._trained = True
        self._finish_info()
        if self._info[1] == 0:
            if self._since_average:
                self._average(int(self._info[3]))     # each epoch ends averaged
            return None
        scores = np.array([score * self._weight], np.float64)
        self._ch.allreduce(scores, "the allreduce of the step's score")
        net._score = float(scores[0])
        net.last_batch_size = self._total_rows
        self._since_average += 1
        if self._since_average == self._averaging_frequency:
            self._average(int(self._info[3]))
        return self._end_step()

    def _average(self, trained: int) -> None:
        """AVERAGING: the mean of the parameters (and the updater state) over the `trained`
        ranks that fitted a batch since the last averaging, on every rank."""
        net, ch = self.model, self._ch
        self._since_average = 0
        if not trained:
            return
        w = 1.0 / trained if self._trained else 0.0
        arrays = [net._params]
        if self._average_updaters:
            arrays += [a for _, _, _, state in net._segments for a in state]
        requests = []
        for arr in arrays:
            ndws.multiply(arr, w, out=arr)
            requests.append(ch.iallreduce(np.asarray(arr)))
        for r in requests:
            ch.wait(r, "the averaging of the parameters and updater state")
        self._trained = False
        if self._report_score_after_averaging and self._rank == 0:
            log.info("Averaged score: %s", net.score())

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, path: Any, save_updater: bool = True) -> None:
        """Rank 0 saves the model in `MultiLayerNetwork.save`'s format. Collective: every rank
        returns once the file is written, or raises if rank 0 could not write it."""
        self._check_open()
        error = None
        if self._rank == 0:
            try:
                self.model.save(path, save_updater)
            except Exception as exc:                  # reported to every rank below
                error = exc
        message = self._ch.bcast_text(None if error is None else
                                      f"{type(error).__name__}: {error}",
                                      "rank 0's checkpoint save")
        if error is not None:
            raise error
        if message:
            raise RuntimeError(f"MPITrainer.save: rank 0 could not save {path!r}: {message}")

    @classmethod
    def load(cls, path: Any, comm: Any = None, load_updater: bool = True,
             **options: Any) -> "MPITrainer":
        """Resume from a checkpoint on any number of ranks. Collective: rank 0 reads `path`
        (written by `save`, `MultiLayerNetwork.save` or `CheckpointListener`; the other ranks
        need not see the file), the others build the network from its configuration, and the
        trainer (`options` as for the constructor) broadcasts rank 0's parameters, updater
        state and counters. An error reading the file is raised on every rank."""
        from ndws.nn.conf import MultiLayerConfiguration
        from ndws.nn.network import MultiLayerNetwork
        MPI = _mpi()
        comm = _check_comm(comm, MPI)
        ch = _Channel(MPI, comm, _check_timeout(options.get("timeout")), lambda: "")
        net, text, error = None, "", None
        if ch.rank == 0:
            try:
                net = MultiLayerNetwork.load(path, load_updater)
                text = "C" + net.conf.to_json()
            except Exception as exc:                   # reported to every rank below
                error = exc
                text = f"E{type(exc).__name__}: {exc}"
        text = ch.bcast_text(text, "rank 0's reading of the checkpoint")
        if text[0] == "E":
            if ch.rank == 0:
                raise error
            raise RuntimeError(f"MPITrainer.load: rank 0 could not read {path!r}: {text[1:]}")
        if net is None:
            net = MultiLayerNetwork(MultiLayerConfiguration.from_json(text[1:]))
            net.init()
        return cls(net, comm, **options)

    # -- what happened ----------------------------------------------------------------------------

    def timeline(self) -> list[tuple[float, str, int]]:
        """With ``trace=True``: the last SHARED_GRADIENTS step's events, each
        ``(microseconds since the step started, event, index)``: ``"backprop done"`` (layer
        index), ``"allreduce started"``, ``"allreduce done"`` (bucket index: found complete
        by a test between two layers), ``"allreduce waited"`` (bucket index: waited for after
        backprop), ``"updated"``."""
        return list(self._last_events)

    def buckets(self) -> list[tuple[int, int, int]]:
        """The gradient buckets of the last fit, in the order they are started: ``(the layer
        whose gradients complete it, start, end)`` in the flat buffer (a graph's layer or
        vertex counted among all of them with parameters or not, in topological order)."""
        return list(self._buckets)

    # -- closing ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MPITrainer: the trainer is closed")

    def close(self) -> None:
        """Free the trainer's communicator (collective); later calls raise RuntimeError.
        Idempotent."""
        if not self._closed:
            self._closed = True
            if getattr(self, "_shm", None) is not None:
                self._shm.free()
                self._shm = None
            self._ch.comm.Free()

    def __enter__(self) -> "MPITrainer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
