"""espalier: train graph neural networks in micro-batches under a memory budget.

A batch that does not fit the device is split into K micro-batches whose accumulated
gradients equal the full batch's. This package is the Rust engine's Python face: the same
loaders, trainer, partitioners and checks as the ``espalier`` command line, whose flags the
keyword arguments of :func:`train` and :func:`partition` are.

>>> import espalier
>>> ds = espalier.Dataset.from_pyg(data)          # or Dataset.from_arrays / Dataset.load
>>> run = espalier.train(ds, epochs=50, memory_budget="2GiB")
>>> emb = run.embeddings()                          # numpy, [num_nodes, hidden]

Progress goes to the ``espalier`` logger (``logging``) and to ``on_epoch``, never to a
stream directly.
"""

from ._espalier import (
    Dataset,
    Partition,
    Run,
    __version__,
    check,
    devices,
    load,
    partition,
    train,
)

__all__ = [
    "Dataset",
    "Partition",
    "Run",
    "__version__",
    "check",
    "devices",
    "load",
    "partition",
    "train",
]
