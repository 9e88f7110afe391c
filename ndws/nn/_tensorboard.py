"""`TensorBoardListener` (docs/training-tools.md, "TensorBoard"): a training listener that writes
TensorBoard event files, with tensorboardX (the optional ``tensorboard`` extra).

Why tensorboardX: it is the maintained TensorBoard writer that needs neither TensorFlow nor
PyTorch (numpy, protobuf and packaging), and it gives the event and summary protos, the
histogram summaries and the record checksum (in C with the ``crc32c`` package, also in the
extra). Its SummaryWriter is not used for the per-iteration values: it hands each value to a
writer thread through a multiprocessing queue, about 100 us a value on the loaded 2-core
machine, more than the digits MLP's whole iteration; the listener frames the records itself
(`_Events`), a batch at a time. The tests read the files back with TensorBoard's own
``EventAccumulator``.

What it costs per iteration (bench/bench_fit.py, the listener row): the values that change at
every iteration (score, samples per second) are written every time; the others (the learning
rate, each workspace's size, last-cycle use and spills, the heap allocations) only when they
change, with the old value repeated at the report before, so a plot of a step function stays a
step function and a steady training loop writes nothing for them.
"""
from __future__ import annotations

import math
import os
import socket
import struct
import time
from typing import Any

import numpy as np

import ndws
from ndws._fileio import output_directory
from ndws.nn.listeners import TrainingListener, _frequency

__all__ = ["TensorBoardListener"]


def _tensorboardx() -> Any:
    try:
        from tensorboardX.crc32c import crc32c
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import histogram
    except ImportError:
        raise ImportError("TensorBoardListener needs tensorboardX: pip install "
                          "'ndws[tensorboard]' (or pip install tensorboardX crc32c)") from None
    return crc32c, Event, histogram


def _tag(name: str) -> str:
    # a workspace id or layer name as one tag component (TensorBoard groups on "/")
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in str(name)) or "_"


class _Events:
    # One TensorBoard event file: tensorboardX's Event protos (a scalar report is one event per
    # step holding every value of that step; histograms from tensorboardX.summary), framed as
    # TFRecords (length, its masked CRC32C, the event, its masked CRC32C: tensorboardX's
    # crc32c, native with the crc32c package) and written in batches. tensorboardX's
    # SummaryWriter puts each value on a multiprocessing queue for a writer thread: about 100 us
    # a value on the loaded 2-core machine, more than the digits MLP's whole iteration, and its
    # synchronous EventsWriter frames each record in Python (12 us a step); a batch costs
    # about 6 us a step.

    #: reported steps kept before they are serialised and written (no fsync)
    BATCH = 256
    #: equal-width buckets of a histogram between its smallest and largest value
    BINS = 64

    def __init__(self, log_dir: str):
        self._crc, self._event, self._histogram = _tensorboardx()
        self.path = os.path.join(log_dir, f"events.out.tfevents.{int(time.time())}."
                                          f"{socket.gethostname()}.{os.getpid()}.ndws")
        self._file = open(self.path, "wb")
        self._pending: list[tuple[int, float, list]] = []
        self._last: tuple[int, list] | None = None   # the last report: (step, its values)
        self._heads: dict[int, bytes] = {}           # event size -> its record's header
        # the first record says which format follows (TensorBoard reads version 2)
        self._records([self._event(wall_time=time.time(),
                                   file_version="brain.Event:2").SerializeToString()])

    def _masked(self, data: bytes) -> int:
        x = self._crc(data) & 0xFFFFFFFF
        return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    def _records(self, events: list) -> None:
        out, pack, masked, heads = [], struct.pack, self._masked, self._heads
        for data in events:
            n = len(data)
            head = heads.get(n)
            if head is None:
                # the length and its checksum: the same for every event of this size
                header = pack("<Q", n)
                head = heads[n] = header + pack("<I", masked(header))
            out += (head, data, pack("<I", masked(data)))
        self._file.write(b"".join(out))

    def report(self, step: int, values: list) -> None:
        self._pending.append((step, time.time(), values))
        self._last = (step, values)
        if len(self._pending) >= self.BATCH:
            self.write()

    def add_to_last(self, tag: str, value: float) -> None:
        # a value for the last reported step (a held value's end before it changes)
        step, values = self._last
        if self._pending and self._pending[-1][0] == step:
            values.append((tag, value))
        else:
            self.report(step, [(tag, value)])

    def histogram(self, step: int, tag: str, values: np.ndarray) -> None:
        self.write()
        event = self._event(wall_time=time.time(), step=step,
                            summary=self._histogram(tag, values, self.BINS))
        self._records([event.SerializeToString()])

    def write(self) -> None:
        if not self._pending:
            return
        events, event_class = [], self._event
        for step, wall, values in self._pending:
            event = event_class(wall_time=wall, step=step)
            add = event.summary.value.add
            for tag, value in values:
                add(tag=tag, simple_value=value)
            events.append(event.SerializeToString())
        self._pending.clear()
        self._records(events)

    def flush(self) -> None:
        self.write()
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    def __del__(self) -> None:
        # a listener dropped without close(): its reports still reach the file (no one is left
        # to hear a failure here, and an unclosed file would only warn)
        f = getattr(self, "_file", None)
        if f is not None and not f.closed:
            try:
                self.write()
            finally:
                f.close()


class TensorBoardListener(TrainingListener):
    """Writes training to TensorBoard event files in `log_dir` (created if missing; open it
    with ``tensorboard --logdir <log_dir>``).

    Every `frequency` iterations: ``score``, ``learning_rate`` (the network's updater; a layer
    with its own updater adds ``learning_rate/layer<i>``), ``samples_per_second``; per
    workspace of the training thread ``workspace/<id>/size`` (bytes reserved),
    ``workspace/<id>/last_cycle`` (bytes the last cycle used) and ``workspace/<id>/spilled``
    (bytes that did not fit, allocated outside it), and ``memory/heap_allocations`` (heap
    allocations of array data since the last report, per iteration: 0 in a steady loop).
    Every `histograms_every` iterations (None: never), for each parameter of each layer
    (``layer<i>_<name>``): the histogram and L2 norm of its values (``params/...``,
    ``param_norm/...``), of its gradient (``gradients/...``, ``gradient_norm/...``) and of the
    update the updater applied (``updates/...``, ``update_norm/...``). Each epoch's held-out
    score (``validation_data``, early stopping) is ``validation_score`` at the epoch's last
    iteration.

    Call `close()` when done (also flushes); the events are flushed at every epoch end too.
    """

    root_worker_only = True  # under ParallelWrapper: the user's model only

    #: seconds between the fsyncs of the event file at epoch ends (it is written at every
    #: epoch end, and synced at close)
    SYNC_SECONDS = 30.0

    def __init__(self, log_dir: Any, frequency: int = 1, histograms_every: int | None = None):
        self.frequency = _frequency("TensorBoardListener", frequency)
        self.histograms_every = (None if histograms_every is None else
                                 _frequency("TensorBoardListener", histograms_every,
                                            "histograms_every"))
        _tensorboardx()                      # the extra is installed (before the folder)
        self.log_dir = output_directory("TensorBoardListener.log_dir", log_dir)
        self._events = _Events(self.log_dir)
        self._synced = time.monotonic()
        self._last_time: float | None = None
        self._last_allocations: int | None = None
        self._held: dict[str, tuple[int, float]] = {}   # tag -> (step, value) last written
        self._before: np.ndarray | None = None          # the parameters before the update
        self._validations = 0
        self._closed = False
        self._tags: dict[str, tuple[str, str, str]] = {}  # workspace id -> its three tags
        self._counters: tuple = ()                         # the workspaces' last counters
        self._own_updaters: tuple | None = None            # (model, [(tag, layer)])

    @property
    def path(self) -> str:
        """The event file."""
        return self._events.path

    # -- writing ----------------------------------------------------------------------------

    def _changed(self, values: list, tag: str, value: float, step: int) -> None:
        # a value that usually stays put: reported when it changes (the old value repeated at
        # the report before, so the plot is a step, not a ramp) and at the first report
        held = self._held.get(tag)
        if held is not None and held[1] == value:
            return
        if held is not None and self._events._last is not None and \
                held[0] < self._events._last[0]:
            self._events.add_to_last(tag, held[1])
        values.append((tag, value))
        self._held[tag] = (step, value)

    def _histograms(self, model: Any, step: int) -> None:
        events = self._events
        norms: list = []
        after = np.asarray(model.params()) if self._before is not None else None
        for layer in model.layers:
            for name, view in layer.params.items():
                tag = f"layer{layer.index}_{_tag(name)}"
                values = np.asarray(view).ravel()
                events.histogram(step, f"params/{tag}", values)
                norms.append((f"param_norm/{tag}", float(np.linalg.norm(values))))
                grad = layer.grads.get(name)
                if grad is not None:
                    g = np.asarray(grad).ravel()
                    events.histogram(step, f"gradients/{tag}", g)
                    norms.append((f"gradient_norm/{tag}", float(np.linalg.norm(g))))
        if after is not None:
            for lyr, name, _, off, size in model._layout:
                tag = f"layer{lyr.index}_{_tag(name)}"
                update = after[off:off + size] - self._before[off:off + size]
                events.histogram(step, f"updates/{tag}", update)
                norms.append((f"update_norm/{tag}", float(np.linalg.norm(update))))
        events.report(step, norms)
        self._before = None

    # -- the hooks --------------------------------------------------------------------------

    def _histogram_step(self, iteration: int) -> bool:
        return self.histograms_every is not None and iteration % self.histograms_every == 0

    def on_gradient_calculation(self, model: Any) -> None:
        # before the update: keep the parameters of an iteration whose update is plotted
        if self._histogram_step(model.iteration):
            self._before = np.array(model.params(), copy=True)

    def iteration_done(self, model: Any, iteration: int, epoch: int) -> None:
        now = time.perf_counter()
        last, self._last_time = self._last_time, now
        if iteration % self.frequency or self._closed:
            return
        values = [("score", float(model.score()))]
        if last is not None:
            values.append(("samples_per_second",
                           model.last_batch_size / max(now - last, 1e-12)))
        changed = self._changed
        changed(values, "learning_rate", model.conf.updater.learning_rate_at(iteration, epoch),
                iteration)
        own = self._own_updaters
        if own is None or own[0] is not model:
            # the layers with an updater of their own, and their tags, found once per model
            own = self._own_updaters = (model, [(f"learning_rate/layer{layer.index}", layer)
                                                for layer in model.layers
                                                if layer.updater is not None])
        for tag, layer in own[1]:
            changed(values, tag, layer.updater.learning_rate_at(iteration, epoch), iteration)
        allocations = ndws.get_memory_manager().allocation_statistics()["allocations"]
        if self._last_allocations is not None:
            changed(values, "memory/heap_allocations", allocations - self._last_allocations,
                    iteration)
        self._last_allocations = allocations
        # the three counters of each workspace of this thread, read directly (the manager's
        # statistics() builds 17 per workspace: most of this listener's cost per iteration),
        # and compared as one tuple first: in a steady loop nothing changes
        counters = tuple((ws.id, ws.current_size, ws.last_cycle_allocations, ws.spilled_size)
                         for ws in ndws.get_workspace_manager(
                         ).get_all_workspaces_for_current_thread())
        if counters != self._counters:
            self._counters = counters
            tags = self._tags
            for ws_id, size, used, spilled in counters:
                names = tags.get(ws_id)
                if names is None:
                    base = f"workspace/{_tag(ws_id)}/"
                    names = tags[ws_id] = (base + "size", base + "last_cycle", base + "spilled")
                changed(values, names[0], size, iteration)
                changed(values, names[1], used, iteration)
                changed(values, names[2], spilled, iteration)
        self._events.report(iteration, values)
        if self._histogram_step(iteration):
            self._histograms(model, iteration)

    def on_epoch_start(self, model: Any) -> None:
        self._last_time = None          # the time between epochs is not an iteration's

    def on_epoch_end(self, model: Any) -> None:
        if self._closed:
            return
        step = model.iteration - 1
        values: list = []
        history = getattr(model, "history", None)
        if history is not None and len(history.validation_scores) > self._validations:
            self._validations = len(history.validation_scores)
            score = history.validation_scores[-1]
            if math.isfinite(score):
                values.append(("validation_score", score))
        # the held values' last points, so each plot reaches the epoch's end
        for tag, (at, value) in list(self._held.items()):
            if at < step:
                values.append((tag, value))
                self._held[tag] = (step, value)
        if values and step >= 0:
            self._events.report(step, values)
        if time.monotonic() - self._synced >= self.SYNC_SECONDS:
            self.flush()
        else:
            self._events.write()

    def flush(self) -> None:
        """Write and sync what was reported."""
        if not self._closed:
            self._events.flush()
            self._synced = time.monotonic()

    def close(self) -> None:
        """Write, sync and close the event file (idempotent); the listener reports nothing
        after it."""
        if not self._closed:
            self._closed = True
            self._events.close()

    def __repr__(self) -> str:
        return (f"TensorBoardListener({self.log_dir!r}, frequency={self.frequency}, "
                f"histograms_every={self.histograms_every})")
