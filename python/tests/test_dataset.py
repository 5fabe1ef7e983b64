"""Datasets from arrays and from PyG-like objects are the OGB loader's dataset: the same
graph, features, labels and split, and so the same training run."""

import gzip
import types

import numpy as np
import pytest

import espalier
from conftest import CORA, SPLIT


def read(path, dtype):
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=1)


@pytest.fixture(scope="module")
def raw():
    """Cora's files read with numpy alone."""
    split = CORA / "split" / SPLIT
    return types.SimpleNamespace(
        edge_index=read(CORA / "raw" / "edge.csv.gz", np.int64).T.copy(),
        x=read(CORA / "raw" / "node-feat.csv.gz", np.float32),
        y=read(CORA / "raw" / "node-label.csv.gz", np.int64),
        train=read(split / "train.csv.gz", np.int64),
        valid=read(split / "valid.csv.gz", np.int64),
        test=read(split / "test.csv.gz", np.int64),
    )


def assert_same_dataset(a, b):
    for attr in ["num_nodes", "num_edges", "num_features", "num_classes"]:
        assert getattr(a, attr) == getattr(b, attr), attr
    for attr in ["edge_index", "x", "y", "train_idx", "valid_idx", "test_idx"]:
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr), err_msg=attr)


def losses(ds, **flags):
    return [e["loss"] for e in espalier.train(ds, epochs=3, hidden=16, **flags).history]


def test_from_arrays_is_the_ogb_loaders_dataset(raw, cora):
    uncached = espalier.Dataset.load(str(CORA), split=SPLIT, cache=False)
    ds = espalier.Dataset.from_arrays(
        raw.edge_index, raw.x, raw.y,
        train_idx=raw.train, valid_idx=raw.valid, test_idx=raw.test, name="cora",
    )
    assert_same_dataset(ds, cora)
    assert_same_dataset(uncached, cora)
    np.testing.assert_array_equal(cora.edge_index, raw.edge_index)
    assert losses(ds) == losses(cora)
    assert losses(ds, micro_batches=4, partitioner="betty") == losses(
        cora, micro_batches=4, partitioner="betty")


def test_a_pyg_like_object_with_masks_is_the_same_dataset(raw, cora):
    n = raw.x.shape[0]
    masks = {}
    for name, ids in [("train_mask", raw.train), ("val_mask", raw.valid),
                      ("test_mask", raw.test)]:
        m = np.zeros(n, dtype=bool)
        m[ids] = True
        masks[name] = m

    class Data:  # what torch_geometric.data.Data offers, with numpy in place of tensors
        def __init__(self, **kw):
            self.__dict__.update(kw)

    data = Data(edge_index=raw.edge_index, x=raw.x, y=raw.y.reshape(-1, 1), num_nodes=n,
                **masks)
    ds = espalier.Dataset.from_pyg(data, name="cora")
    # Masks give sorted ids; the files list them in their own order.
    for attr in ["edge_index", "x", "y"]:
        np.testing.assert_array_equal(getattr(ds, attr), getattr(cora, attr))
    for attr in ["train_idx", "valid_idx", "test_idx"]:
        np.testing.assert_array_equal(getattr(ds, attr), np.sort(getattr(cora, attr)))
    sorted_split = espalier.Dataset.from_arrays(
        raw.edge_index, raw.x, raw.y, train_idx=np.sort(raw.train),
        valid_idx=np.sort(raw.valid), test_idx=np.sort(raw.test))
    assert losses(ds) == losses(sorted_split)


def test_objects_with_array_interface_are_taken_like_numpy(raw):
    class Tensor:  # a CPU tensor: only __array__
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    ds = espalier.Dataset.from_arrays(Tensor(raw.edge_index), Tensor(raw.x), Tensor(raw.y))
    np.testing.assert_array_equal(ds.x, raw.x)


def test_float32_features_are_shared_not_copied(raw):
    x = raw.x.copy()
    ds = espalier.Dataset.from_arrays(raw.edge_index, x, raw.y)
    x[3, 5] = 42.0
    assert ds.x[3, 5] == 42.0
    # Another dtype is converted: a copy.
    x64 = raw.x.astype(np.float64)
    ds = espalier.Dataset.from_arrays(raw.edge_index, x64, raw.y)
    x64[3, 5] = 42.0
    assert ds.x[3, 5] == raw.x[3, 5]


def test_what_is_missing_is_synthesized_as_for_a_folder(tmp_path, raw):
    # Edges only: features, labels and split are synthesized from the seed, as the loader
    # does for a folder with raw/edge.csv.gz and raw/num-node-list.csv.gz alone.
    folder = tmp_path / "edges-only" / "raw"
    folder.mkdir(parents=True)
    with gzip.open(folder / "edge.csv.gz", "wt") as f:
        np.savetxt(f, raw.edge_index.T, fmt="%d", delimiter=",")
    with gzip.open(folder / "num-node-list.csv.gz", "wt") as f:
        f.write(f"{raw.x.shape[0]}\n")
    loaded = espalier.Dataset.load(str(folder.parent), cache=False, seed=3, feat_dim=20)
    ds = espalier.Dataset.from_arrays(raw.edge_index, num_nodes=raw.x.shape[0], seed=3,
                                      feat_dim=20)
    assert_same_dataset(ds, loaded)
    assert any(n.startswith("no x:") for n in ds.notes), ds.notes
