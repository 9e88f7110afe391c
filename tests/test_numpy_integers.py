"""Every int argument of the public API takes a NumPy integer (``np.int64(8)``, what indexing and
arithmetic on NumPy arrays give) as the int it holds, and refuses a bool; a float argument takes
NumPy floats. The listeners, fit, memory_report and the record readers have their own tests;
these are the rest, found by searching the code for isinstance(..., int)."""
import numpy as np
import pytest

import ndws
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.parallel import ParallelInference, ParallelWrapper


def network():
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=6, activation="relu"),
         OutputLayer(n_out=3, activation="softmax")], seed=2, updater=Adam(1e-2)))
    net.init()
    return net


def test_thread_counts():
    before = ndws.get_num_threads()
    try:
        ndws.set_num_threads(np.int64(1))
        assert ndws.get_num_threads() == 1
        with ndws.num_threads(np.int32(1)):
            assert ndws.get_num_threads() == 1
        with pytest.raises(TypeError, match=r"^n: expected a positive int, got True$"):
            ndws.set_num_threads(True)
        with pytest.raises(TypeError, match=r"^n: expected a positive int"):
            ndws.set_num_threads(np.float64(2.0))
    finally:
        ndws.set_num_threads(before)


def test_workspace_configuration_numbers():
    conf = ndws.WorkspaceConfiguration(initial_size=np.int64(4096),
                                       overallocation_limit=np.float32(0.5))
    assert conf.initial_size == 4096 and type(conf.overallocation_limit) is float
    assert conf.overallocation_limit == 0.5
    assert ndws.WorkspaceConfiguration(overallocation_limit=np.int64(1)).overallocation_limit == 1
    with pytest.raises(ValueError, match="overallocation_limit"):
        ndws.WorkspaceConfiguration(overallocation_limit=True)


def test_parallel_wrapper_and_inference_options(rng):
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    with ParallelWrapper(network(), workers=np.int64(2), prefetch_buffer=np.int32(1),
                         averaging_frequency=np.uint8(1)) as pw:
        assert pw.workers == 2 and type(pw.workers) is int
        history = pw.fit(x, y, batch_size=np.int64(4), epochs=np.int64(2))
        assert history.epochs == [0, 1]
        with pytest.raises(ValueError, match=r"^epochs: expected an int >= 1, got True$"):
            pw.fit(x, y, epochs=True)
    with pytest.raises(TypeError, match=r"^workers: expected an int, got bool$"):
        ParallelWrapper(network(), workers=True)
    with ParallelInference(network(), workers=np.int64(1), batch_limit=np.int16(8),
                           queue_limit=np.int64(4)) as pi:
        assert pi.output(x).shape == (16, 3)


def test_mpi_trainer_options():
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from ndws.parallel import MPITrainer
    x = np.ones((8, 4), np.float32)
    y = np.zeros(8, np.int64)
    with MPITrainer(network(), MPI.COMM_SELF, averaging_frequency=np.int64(2),
                    bucket_bytes=np.int64(0), timeout=np.float32(30), kernel_threads=np.int8(1),
                    training_mode="AVERAGING") as trainer:
        history = trainer.fit(x, y, batch_size=np.int64(4), epochs=np.int64(2))
        assert len(history.iterations) == 4
    with pytest.raises(TypeError, match=r"^bucket_bytes: expected an int >= 0, got bool$"):
        MPITrainer(network(), MPI.COMM_SELF, bucket_bytes=False)
