"""Ctrl-C while training raises KeyboardInterrupt after the current batch, with nothing
corrupted: the finished epochs are kept, and training again gives the same run. An exception
in on_epoch stops the run the same way and comes back to the caller."""

import _thread
import signal
import threading
import time

import pytest

import espalier

FLAGS = {"hidden": 16, "batch_size": 20}


@pytest.fixture
def sigint_raises():
    """Python's own Ctrl-C handler for the test: a process started with SIGINT ignored (a
    background job of a non-interactive shell) would otherwise ignore the simulated Ctrl-C,
    as it would a real one."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_interrupt_from_a_thread_stops_after_the_current_batch(cora, sigint_raises):
    seen = []
    timer = None

    def on_epoch(e):
        nonlocal timer
        seen.append(e)
        if timer is None:  # interrupt once training is under way
            timer = threading.Timer(0.05, _thread.interrupt_main)
            timer.start()

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as e:
        espalier.train(cora, epochs=10_000, on_epoch=on_epoch, **FLAGS)
    assert time.monotonic() - started < 60
    run = e.value.run
    assert 1 <= len(run.history) < 10_000
    assert run.history == seen
    assert run.summary["interrupted"]
    # Nothing corrupted: the same epochs again give the same figures, and the interrupted
    # run's model still predicts.
    again = espalier.train(cora, epochs=len(seen), **FLAGS)
    assert [h["loss"] for h in again.history] == [h["loss"] for h in seen]
    assert run.predict([0, 1]).shape == (2, cora.num_classes)


def test_signal_handler_runs_while_training_releases_the_gil(cora):
    # Another Python thread runs while espalier trains: the GIL is released.
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        espalier.train(cora, epochs=20, **FLAGS)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 10


def test_an_exception_in_on_epoch_stops_the_run_and_propagates(cora):
    def on_epoch(e):
        if e["epoch"] == 2:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough") as e:
        espalier.train(cora, epochs=50, on_epoch=on_epoch, **FLAGS)
    assert len(e.value.run.history) == 2
