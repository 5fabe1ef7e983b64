"""Every bad input raises the Python exception of its kind, with the command line's message:
ValueError for a bad flag or malformed input, MemoryError when memory runs out, OSError for
files, RuntimeError for a missing backend; TypeError for what Python itself would refuse."""

import gc
import gzip

import numpy as np
import pytest

import espalier
from conftest import CORA, SPLIT, run_cli

# (keyword arguments of train, the same as flags, the exception)
FLAG_CASES = [
    ({"hidden": 0}, ["--hidden", "0"], ValueError),
    ({"fanouts": [0, 5]}, ["--fanouts=0,5"], ValueError),
    ({"model": "gcn", "aggr": "mean"}, ["--model", "gcn", "--aggr", "mean"], ValueError),
    ({"model": "transformer"}, ["--model", "transformer"], ValueError),
    ({"partitioner": "nope"}, ["--partitioner", "nope"], ValueError),
    ({"optimizer": "sgdd"}, ["--optimizer", "sgdd"], ValueError),
    ({"memory_budget": "12XB"}, ["--memory-budget", "12XB"], ValueError),
    ({"dropout": 1.5}, ["--dropout", "1.5"], ValueError),
    ({"epochs": "many"}, ["--epochs", "many"], ValueError),
    ({"chunks": 3}, ["--chunks", "3"], ValueError),
    ({"lr_schedule": "step"}, ["--lr-schedule", "step"], ValueError),
    ({"patience": 0}, ["--patience", "0"], ValueError),
    ({"micro_batches": 0}, ["--micro-batches", "0"], ValueError),
    ({"device": "cuda:99"}, ["--device", "cuda:99"], RuntimeError),
    ({"memory_budget": "2MiB"}, ["--memory-budget", "2MiB"], ValueError),
]


@pytest.mark.parametrize("kwargs,flags,exc", FLAG_CASES,
                         ids=[" ".join(c[1]) for c in FLAG_CASES])
def test_a_bad_flag_raises_with_the_cli_message(cli, cora, kwargs, flags, exc):
    code, _, message = run_cli(cli, "train", "--dataset", CORA, "--split", SPLIT, *flags)
    # 1 for espalier's errors, 2 for those of the flag parser.
    assert code in (1, 2) and message, "the CLI accepted it"
    with pytest.raises(exc) as e:
        espalier.train(cora, **kwargs)
    assert str(e.value) == message


def write_gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


@pytest.mark.parametrize(
    "case,exc",
    [("missing", OSError), ("bad-edge", ValueError), ("no-split", ValueError),
     ("overlap", ValueError)],
)
def test_a_bad_dataset_raises_with_the_cli_message(cli, tmp_path, case, exc):
    d = tmp_path / case
    split = None
    if case != "missing":
        write_gz(d / "raw" / "num-node-list.csv.gz", "4\n")
        edges = "0,1\n1,2\n2,x\n" if case == "bad-edge" else "0,1\n1,2\n2,3\n"
        write_gz(d / "raw" / "edge.csv.gz", edges)
    if case == "no-split":
        split = "nope"
        write_gz(d / "split" / "a" / "train.csv.gz", "0\n")
    if case == "overlap":
        write_gz(d / "split" / "s" / "train.csv.gz", "0\n1\n")
        write_gz(d / "split" / "s" / "valid.csv.gz", "2\n1\n")
    flags = ["--split", split] if split else []
    code, _, message = run_cli(cli, "train", "--dataset", d, "--no-cache", *flags)
    assert code == 1 and message
    with pytest.raises(exc) as e:
        espalier.Dataset.load(str(d), split=split, cache=False)
    assert str(e.value) == message


@pytest.fixture(scope="module")
def edges():
    return np.array([[0, 1, 2, 3], [1, 2, 3, 0]])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"edge_index": np.array([[0.0, 1.0], [1.0, 0.0]])},
         "edge_index: expected integer node ids, got dtype float64"),
        ({"edge_index": np.zeros((3, 4), dtype=np.int64)},
         r"edge_index: expected shape \[2, num_edges\], got \[3, 4\]"),
        ({"num_nodes": 3}, r"edge_index\[0, 3\]: node id 3 out of range for 3 nodes"),
        ({"edge_index": np.array([[0, -1], [1, 0]])},
         r"edge_index\[0, 1\]: node id -1 out of range"),
        ({"edge_index": np.zeros((2, 0), dtype=np.int64)}, "edge_index: no edges"),
        ({"x": np.ones((3, 2)), "num_nodes": 4}, "x: 3 rows but there are 4 nodes"),
        ({"x": np.array([[0.0], [np.nan], [0.0], [0.0]])},
         r"x\[1, 0\]: NaN is not a finite number"),
        ({"x": np.array(["a", "b", "c", "d"]).reshape(4, 1)}, "x: expected numbers"),
        ({"y": np.array([0, 1, -2, 1])}, r"y\[2\]: negative label -2"),
        ({"y": np.array([0, 1, 7, 1])}, r"y\[2\]: label 7 implies 8 classes, more than"),
        ({"y": np.array([0.0, 0.5, 1.0, 1.0])}, r"y\[1\]: not an integer label 0.5"),
        ({"y": np.array([0, 1]), "num_nodes": 4}, "y: 2 labels but there are 4 nodes"),
        ({"train_idx": [0, 1], "valid_idx": [2, 1]},
         r"valid_idx\[1\]: node 1 is also in train_idx\[1\]: the split parts overlap"),
        ({"train_idx": [0, 0]}, r"train_idx\[1\]: node 0 listed twice"),
        ({"train_idx": [0, 9]}, r"train_idx\[1\]: node id 9 out of range for 4 nodes"),
        ({"train_idx": np.array([True, False, True])},
         "train_idx: a boolean mask of 3 entries for 4 nodes"),
        ({"valid_idx": [1]}, "train_idx: no training nodes"),
        ({"classes": 0}, "--classes 0: must be between 1"),
    ],
)
def test_from_arrays_errors_name_the_argument(edges, kwargs, message):
    args = {"edge_index": edges, **kwargs}
    with pytest.raises(ValueError, match=message):
        espalier.Dataset.from_arrays(**args)


def test_python_level_mistakes_raise_type_error(cora):
    with pytest.raises(TypeError, match="unexpected keyword argument 'hiden'"):
        espalier.train(cora, hiden=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'checkpoint'"):
        espalier.train(cora, checkpoint="x")
    with pytest.raises(TypeError, match="on_epoch: expected a callable"):
        espalier.train(cora, on_epoch=3)
    with pytest.raises(TypeError, match="full_graph: expected True or False"):
        espalier.train(cora, full_graph="yes")
    with pytest.raises(TypeError, match="no edge_index"):
        espalier.Dataset.from_pyg(object())
    with pytest.raises(TypeError, match="give k or micro_batches"):
        espalier.partition(cora, k=2, micro_batches=2)


def test_bad_node_ids_name_the_argument(cora):
    run = espalier.train(cora, epochs=1, hidden=8)
    with pytest.raises(ValueError, match=r"nodes\[1\]: node id 99999 out of range"):
        run.predict([0, 99999])
    with pytest.raises(ValueError, match=r"seeds\[2\]: node 5 listed twice"):
        espalier.partition(cora, [4, 5, 5])
    with pytest.raises(ValueError, match=r"seeds\[0\]: node id -1 out of range"):
        espalier.partition(cora, [-1])


def test_running_out_of_memory_raises_memory_error_and_budgets_stay_with_their_run(cora):
    # Trained under 2 MiB in micro-batches of one-neighbour samples; predicting the hub
    # node with every neighbour needs more: a MemoryError from the same budget.
    small = espalier.train(cora, epochs=1, hidden=16, fanouts=[1, 1], micro_batches=8,
                           memory_budget="2MiB")
    degree = np.bincount(cora.edge_index.ravel(), minlength=cora.num_nodes)
    hub = int(degree.argmax())
    with pytest.raises(MemoryError, match="out of memory on cpu: .* budget 2097152 bytes"):
        small.predict([hub])
    # The run alive does not impose its budget on the next one, nor on its own predictions
    # of small nodes.
    big = espalier.train(cora, epochs=1, hidden=64)
    assert big.predict([hub]).shape == (1, cora.num_classes)
    # The tracker is the process's: with the bigger run gone, a small node fits.
    del big
    gc.collect()
    assert small.predict([int(degree.argmin())]).shape == (1, cora.num_classes)
