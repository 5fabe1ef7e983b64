"""Training from Python gives the command line's run: the same per-epoch figures, bit for
bit, at the same seed and flags."""

import math

import numpy as np
import pytest

import espalier
from conftest import CORA, SPLIT, cli_json

# The figures of an epoch that do not depend on timing.
EXACT = ["epoch", "loss", "train_acc", "valid_acc", "test_acc", "micro_batches", "lr",
         "skipped_batches"]


def same_epochs(py_epochs, cli_epochs):
    assert len(py_epochs) == len(cli_epochs)
    for p, c in zip(py_epochs, cli_epochs):
        for key in EXACT:
            assert p.get(key) == c.get(key), (key, p.get(key), c.get(key))


@pytest.mark.parametrize(
    "flags",
    [
        {"epochs": 4, "hidden": 32},
        {"epochs": 3, "hidden": 16, "micro_batches": 3, "partitioner": "betty", "seed": 7},
        {"epochs": 3, "model": "gcn", "hidden": 16, "fanouts": [10, 5], "batch_size": 64},
        {"epochs": 3, "hidden": 16, "memory_budget": "16MiB", "partitioner": "metis"},
    ],
    ids=["sage", "betty-k3-seed7", "gcn-batches", "budget"],
)
def test_cora_losses_equal_the_cli_bit_for_bit(cli, tmp_path, cora, flags):
    args = ["train", "--dataset", CORA, "--split", SPLIT]
    for k, v in flags.items():
        v = ",".join(map(str, v)) if isinstance(v, list) else v
        args.append(f"--{k.replace('_', '-')}={v}")
    want = cli_json(cli, tmp_path, *args)
    seen = []
    run = espalier.train(cora, on_epoch=seen.append, **flags)
    same_epochs(run.history, want["epochs"])
    same_epochs(seen, want["epochs"])
    for key in ["test_acc", "valid_acc", "final_loss", "best_valid_acc", "num_parameters"]:
        assert run.summary[key] == want[key], key
    assert run.test_acc == want["test_acc"]
    assert run.best_valid == want["best_valid_acc"]
    assert run.summary["config"] == want["config"]
    assert [m["k"] for m in run.summary["micro_batches"]] == [
        m["k"] for m in want["micro_batches"]
    ]


def test_predictions_and_embeddings_are_numpy_of_the_trained_model(cora):
    run = espalier.train(cora, epochs=3, hidden=16)
    logits = run.predict()
    assert logits.shape == (cora.num_nodes, cora.num_classes)
    assert logits.dtype == np.float32
    some = run.predict(np.array([5, 0, 9]))
    # Other batch shapes sum in another order: equal to float rounding.
    np.testing.assert_allclose(some, logits[[5, 0, 9]], rtol=1e-5, atol=1e-6)
    emb = run.embeddings([1, 2])
    assert emb.shape == (2, 16) and emb.dtype == np.float32
    # Full-neighbour inference is deterministic.
    np.testing.assert_array_equal(run.embeddings([1, 2]), emb)
    # Accuracy of the logits on the test nodes is that of a trained model, not chance.
    test = cora.test_idx
    acc = float((logits[test].argmax(1) == cora.y[test]).mean())
    assert acc > 0.3, acc
    assert run.peak_bytes > 0 and math.isfinite(run.final_loss)


def test_checkpoint_saved_from_python_loads_back_and_resumes_in_the_cli(cli, tmp_path, cora):
    run = espalier.train(cora, epochs=2, hidden=16)
    path = tmp_path / "run.safetensors"
    run.save(path)
    back = espalier.load(path, cora, hidden=16)
    assert back.history == run.history
    np.testing.assert_array_equal(back.predict(), run.predict())
    with pytest.raises(ValueError, match="another configuration.*hidden"):
        espalier.load(path, cora, hidden=32)
    # The CLI resumes it: 2 more epochs give what 4 epochs in one run give.
    resumed = cli_json(cli, tmp_path, "train", "--dataset", CORA, "--split", SPLIT,
                       "--hidden", 16, "--epochs", 4, "--resume", path)
    whole = espalier.train(cora, epochs=4, hidden=16)
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in whole.history]


def test_progress_goes_to_the_logger_not_to_stdout(cora, capfd, caplog):
    caplog.set_level("INFO", logger="espalier")
    espalier.train(cora, epochs=2, hidden=8)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    lines = [r.getMessage() for r in caplog.records if r.name == "espalier"]
    assert any(l.startswith("epoch    2/2  loss") for l in lines), lines


def test_wgpu_from_python_gives_the_cpus_losses(cora):
    adapters = espalier.devices()["wgpu"]
    if not adapters["adapters"]:
        pytest.skip(f"no wgpu adapter: {adapters['unavailable']}")
    flags = {"epochs": 3, "hidden": 16, "micro_batches": 2}
    cpu = espalier.train(cora, **flags)
    gpu = espalier.train(cora, device="wgpu", **flags)
    for a, b in zip(cpu.history, gpu.history):
        assert abs(a["loss"] - b["loss"]) < 1e-3
    # Trained on the worker thread, read from this one.
    np.testing.assert_allclose(gpu.predict([0, 1, 2]), cpu.predict([0, 1, 2]), atol=1e-4)


def test_python_values_are_spelled_as_flags(cora):
    # NumPy arrays and scalars, ints for byte sizes, bools for switches: the same run as
    # the flags' text.
    a = espalier.train(cora, epochs=2, hidden=8, fanouts=np.array([5, 5]),
                       memory_budget=2**30, lr=np.float32(0.02), symmetrize=True)
    b = espalier.train(cora, epochs=2, hidden=8, fanouts="5,5", memory_budget="1GiB",
                       lr=float(np.float32(0.02)))
    assert [e["loss"] for e in a.history] == [e["loss"] for e in b.history]
    assert a.summary["config"] == b.summary["config"]
