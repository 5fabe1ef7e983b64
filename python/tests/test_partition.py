"""`espalier.partition` gives the micro-batches `espalier partition` makes: the same K,
sizes, input nodes, estimated (and measured) peaks and redundancy, with each micro-batch's
seeds, which cover the batch once."""

import gc

import numpy as np
import pytest

import espalier
from conftest import CORA, SPLIT, cli_json


@pytest.mark.parametrize(
    "flags",
    [
        {"partitioner": "betty", "k": 4},
        {"partitioner": "random", "k": 3, "seed": 5, "hidden": 32},
        {"partitioner": "buffalo", "memory_budget": "12MiB", "hidden": 64},
        {"partitioner": "metis", "k": 2, "measure": True},
    ],
    ids=["betty-k4", "random-k3-seed5", "buffalo-budget", "metis-measured"],
)
def test_partition_is_the_clis(cli, tmp_path, cora, flags):
    flags = dict(flags)
    measure = flags.pop("measure", False)
    args = ["partition", "--dataset", CORA, "--split", SPLIT]
    for k, v in flags.items():
        args.append(f"--{'micro-batches' if k == 'k' else k.replace('_', '-')}={v}")
    if not measure:
        args.append("--no-run")
    want = cli_json(cli, tmp_path, *args)["micro_batches"]
    assert len(want) == 1
    want = want[0]
    # Measured peaks are the process's: runs of earlier tests still alive would count.
    gc.collect()
    got = espalier.partition(cora, measure=measure, **flags)
    assert got.k == want["k"] == len(got.parts)
    assert got.redundancy == want["redundancy"]
    assert [len(p) for p in got.parts] == [b["seeds"] for b in want["batches"]]
    assert got.input_nodes == [b["input_nodes"] for b in want["batches"]]
    assert got.est_peak_bytes == [b["est_peak_bytes"] for b in want["batches"]]
    if measure:
        assert got.peak_bytes == [b["peak_bytes"] for b in want["batches"]]
    else:
        assert got.peak_bytes is None
    assert got.stats["batches"][0]["seeds"] == want["batches"][0]["seeds"]
    # The parts cover the training seeds once.
    every = np.concatenate(got.parts)
    np.testing.assert_array_equal(np.sort(every), np.sort(cora.train_idx))


def test_partition_of_given_seeds(cora):
    seeds = np.arange(0, 600, 3)
    p = espalier.partition(cora, seeds, k=5, partitioner="range", fanouts=[5, 5])
    assert len(p) == 5
    np.testing.assert_array_equal(np.sort(np.concatenate(list(p.parts))), seeds)
    np.testing.assert_array_equal(p[-1], p.parts[4])
    assert p.redundancy >= 1.0
    # Deterministic: the same seed gives the same micro-batches.
    again = espalier.partition(cora, seeds, k=5, partitioner="range", fanouts=[5, 5])
    assert all((a == b).all() for a, b in zip(p.parts, again.parts))
