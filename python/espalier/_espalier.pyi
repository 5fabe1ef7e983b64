"""Type stubs of espalier's extension module (re-exported by ``espalier``).

The keyword arguments of ``train``, ``load``, ``partition`` and ``check`` are the command
line's flags (``micro_batches`` is ``--micro-batches``) with the command line's defaults,
which a test holds these stubs to.
"""

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

_ArrayLike = Any  # a NumPy array or anything with __array__ (a CPU torch tensor)
_Path = Union[str, "os.PathLike[str]"]
_Int = Union[int, str]  # a count, or the flag's text
_Fanouts = Union[Sequence[int], str]

class Dataset:
    """A graph with node features, labels and a train/valid/test split: what ``espalier
    train --dataset`` loads. Make one with ``Dataset.load``, ``Dataset.from_arrays`` or
    ``Dataset.from_pyg``."""

    @staticmethod
    def load(
        spec: str,
        split: Optional[str] = None,
        *,
        feat_dim: Optional[int] = None,
        classes: Optional[int] = None,
        seed: int = 0,
        cache: bool = True,
        cache_dir: Optional[_Path] = None,
        data_root: Optional[_Path] = None,
    ) -> "Dataset":
        """Loads what ``espalier train --dataset SPEC [--split SPLIT]`` loads: a folder in
        OGB's raw layout, an edge-list file, a name under ``data_root`` (``ogbn-arxiv``,
        ``cora``...) or ``synthetic:PRESET[,scale=X][,seed=N]``, through the same binary
        cache. ``feat_dim``, ``classes`` and ``seed`` are ``--feat-dim``, ``--classes`` and
        ``--seed`` for what is synthesized (the CLI's one ``--seed`` also seeds training:
        ``train`` takes its own). Raises ``OSError`` for a missing file,
        ``ValueError`` for malformed content, with the command line's messages."""
    @staticmethod
    def from_arrays(
        edge_index: _ArrayLike,
        x: Optional[_ArrayLike] = None,
        y: Optional[_ArrayLike] = None,
        *,
        train_idx: Optional[_ArrayLike] = None,
        valid_idx: Optional[_ArrayLike] = None,
        test_idx: Optional[_ArrayLike] = None,
        num_nodes: Optional[int] = None,
        name: str = "arrays",
        feat_dim: Optional[int] = None,
        classes: Optional[int] = None,
        seed: int = 0,
    ) -> "Dataset":
        """A dataset from arrays: ``edge_index`` ``[2, num_edges]`` (sources, then
        destinations), ``x`` ``[num_nodes, num_features]`` (shared, not copied, when it is
        C-contiguous float32: do not write it while the dataset is in use), ``y`` one label
        per node (-1 or NaN for none), the split as node ids or boolean masks. What is
        missing is synthesized from ``seed`` as for a folder that lacks it. A ``ValueError``
        names the argument at fault (dtype, shape, id range, label, overlapping split)."""
    @staticmethod
    def from_pyg(
        data: Any,
        *,
        name: str = "pyg",
        feat_dim: Optional[int] = None,
        classes: Optional[int] = None,
        seed: int = 0,
    ) -> "Dataset":
        """A dataset from a PyTorch Geometric ``Data`` object by duck typing (neither torch
        nor PyG is imported): ``edge_index``, ``x``, ``y``, ``num_nodes`` and
        ``train_mask``/``val_mask``/``test_mask`` (or ``train_idx``/``valid_idx``/
        ``test_idx``), as ``from_arrays`` takes them. Tensors must be on the CPU."""
    @property
    def name(self) -> str:
        """The dataset's name (the folder's, the spec's, or the one given)."""
    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
    @property
    def num_edges(self) -> int:
        """Number of edges as given (before ``symmetrize`` adds reverse edges)."""
    @property
    def num_features(self) -> int:
        """Features per node."""
    @property
    def num_classes(self) -> int:
        """Number of classes."""
    @property
    def train_idx(self) -> npt.NDArray[np.int64]:
        """Training node ids (a copy)."""
    @property
    def valid_idx(self) -> npt.NDArray[np.int64]:
        """Validation node ids (a copy)."""
    @property
    def test_idx(self) -> npt.NDArray[np.int64]:
        """Test node ids (a copy)."""
    @property
    def notes(self) -> List[str]:
        """What was synthesized or noticed while loading (also logged as warnings)."""
    @property
    def edge_index(self) -> npt.NDArray[np.int64]:
        """The edges as given, ``[2, num_edges]`` (a copy)."""
    @property
    def x(self) -> npt.NDArray[np.float32]:
        """The features, ``[num_nodes, num_features]`` (a copy)."""
    @property
    def y(self) -> npt.NDArray[np.int64]:
        """The labels, ``[num_nodes]``, -1 for a node without one (a copy)."""

class Run:
    """A finished training run: its figures (the command line's ``--json``) and the
    trained model for predictions and embeddings."""

    @property
    def summary(self) -> Dict[str, Any]:
        """The whole summary as ``espalier train --json`` writes it."""
    @property
    def history(self) -> List[Dict[str, Any]]:
        """One dict per finished epoch (the JSON's ``epochs``)."""
    @property
    def test_acc(self) -> float:
        """Test accuracy after the last epoch."""
    @property
    def valid_acc(self) -> float:
        """Validation accuracy after the last epoch."""
    @property
    def best_valid(self) -> Optional[float]:
        """The best validation accuracy of the run."""
    @property
    def best_valid_epoch(self) -> Optional[int]:
        """The epoch of the best validation accuracy."""
    @property
    def test_acc_at_best_valid(self) -> Optional[float]:
        """Test accuracy at the best validation epoch (the OGB rule)."""
    @property
    def final_loss(self) -> float:
        """The last epoch's loss."""
    @property
    def peak_bytes(self) -> int:
        """Peak bytes on the training device (the process's tracker: other live runs
        count too)."""
    def predict(self, nodes: Optional[_ArrayLike] = None) -> npt.NDArray[np.float32]:
        """Logits of ``nodes`` (all nodes when None), ``[len(nodes), num_classes]``, from
        full-neighbour inference."""
    def embeddings(self, nodes: Optional[_ArrayLike] = None) -> npt.NDArray[np.float32]:
        """The last hidden layer's output for ``nodes`` (all nodes when None),
        ``[len(nodes), hidden]``, from full-neighbour inference. Needs at least two layers;
        not for GAT."""
    def save(self, path: _Path) -> None:
        """Writes the run's safetensors checkpoint (what ``espalier train --checkpoint``
        writes), atomically."""

class Partition:
    """One batch split into micro-batches: each micro-batch's seeds with the partition's
    figures, as ``espalier partition --json`` reports them."""

    @property
    def k(self) -> int:
        """Number of micro-batches."""
    @property
    def parts(self) -> List[npt.NDArray[np.int64]]:
        """The seeds of each micro-batch, in the order they run."""
    @property
    def redundancy(self) -> float:
        """Sum of the micro-batches' input nodes over the whole batch's."""
    @property
    def est_peak_bytes(self) -> List[int]:
        """The memory estimator's peak bytes of each micro-batch."""
    @property
    def peak_bytes(self) -> Optional[List[int]]:
        """Measured peak bytes of each micro-batch (None unless ``measure``; the process's
        tracker: other live runs count too)."""
    @property
    def input_nodes(self) -> List[int]:
        """Input nodes (feature rows gathered) of each micro-batch."""
    @property
    def stats(self) -> Dict[str, Any]:
        """The figures as one entry of ``espalier partition --json``'s ``micro_batches``."""
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> npt.NDArray[np.int64]: ...

def train(
    dataset: Dataset,
    *,
    on_epoch: Optional[Callable[[Dict[str, Any]], Any]] = None,
    model: str = "sage",
    aggr: Optional[str] = None,
    heads: Optional[Union[int, str]] = None,
    attn_dropout: Optional[Union[float, str]] = None,
    self_loops: Optional[Union[bool, str]] = None,
    lstm_split: Optional[int] = None,
    layers: Optional[int] = None,
    hidden: int = 256,
    fanouts: Optional[_Fanouts] = None,
    batch_size: Union[int, str] = "full",
    dropout: float = 0.5,
    optimizer: str = "adam",
    micro_batches: Optional[int] = None,
    partitioner: str = "random",
    loader: str = "slice",
    memory_budget: Optional[Union[int, str]] = None,
    seed: int = 0,
    device: str = "cpu",
    feature_dtype: str = "f32",
    features: str = "auto",
    symmetrize: bool = True,
    epochs: int = 50,
    lr: float = 0.01,
    lr_schedule: str = "none",
    lr_step_size: Optional[int] = None,
    lr_gamma: float = 0.1,
    weight_decay: float = 0.0005,
    patience: Optional[int] = None,
    on_nan: str = "stop",
    profile: bool = False,
    full_graph: bool = False,
    chunks: Optional[int] = None,
    node_order: str = "grem",
    dedup_transfers: str = "auto",
    hybrid: bool = False,
    overlap: Optional[bool] = None,
    eval_every: int = 1,
    eval_batch_size: int = 4096,
) -> Run:
    """Trains a model on ``dataset`` as ``espalier train`` does: every keyword argument is
    the command-line flag of that name, with the same default, checks and messages, and
    the same seed gives the same per-epoch losses. ``on_epoch`` is called after each epoch
    with its dict. The GIL is released while training; Ctrl-C raises ``KeyboardInterrupt``
    after the current batch (its ``run`` attribute holds the finished epochs).
    ``memory_budget`` is set on the device for the call and for the run's predictions (one
    budget per process: train budgeted runs one at a time, not from several threads). Errors:
    ``ValueError`` (bad input, invalid flag), ``MemoryError`` (out of memory), ``OSError``
    (files), ``RuntimeError`` (a backend missing or failing)."""

def load(
    path: _Path,
    dataset: Dataset,
    **kwargs: Any,
) -> Run:
    """Loads a checkpoint written by ``Run.save`` (or ``espalier train --checkpoint``) for
    ``dataset``; the keyword arguments are those of ``train`` the run was trained with
    (``epochs`` aside), and a checkpoint of another dataset or configuration is refused,
    naming what differs. Nothing is trained."""

def partition(
    dataset: Dataset,
    seeds: Optional[_ArrayLike] = None,
    *,
    k: Optional[int] = None,
    measure: bool = False,
    model: str = "sage",
    aggr: Optional[str] = None,
    heads: Optional[Union[int, str]] = None,
    attn_dropout: Optional[Union[float, str]] = None,
    self_loops: Optional[Union[bool, str]] = None,
    lstm_split: Optional[int] = None,
    layers: Optional[int] = None,
    hidden: int = 256,
    fanouts: Optional[_Fanouts] = None,
    batch_size: Union[int, str] = "full",
    dropout: float = 0.5,
    optimizer: str = "adam",
    micro_batches: Optional[int] = None,
    partitioner: str = "random",
    loader: str = "slice",
    memory_budget: Optional[Union[int, str]] = None,
    seed: int = 0,
    device: str = "cpu",
    feature_dtype: str = "f32",
    features: str = "auto",
    symmetrize: bool = True,
) -> Partition:
    """Samples the blocks of ``seeds`` (the training nodes when None) as batch 0 of epoch 0
    of a training run with the same flags, and splits them into ``k`` micro-batches (or,
    under ``memory_budget``, the fewest that fit) as ``espalier partition`` does. With
    ``measure``, each micro-batch runs forward and backward to measure its peak."""

def devices() -> Dict[str, Any]:
    """What this build can run on, as ``espalier devices --json`` prints it."""

def check(
    *,
    device: Optional[Union[str, Sequence[str]]] = None,
    quick: bool = False,
    full: bool = False,
    only: Optional[Union[str, Sequence[str]]] = None,
    data: Optional[str] = None,
) -> Dict[str, Any]:
    """Checks each GPU device against the CPU reference, as ``espalier check --json`` does,
    and returns that JSON: ``records`` (``device``, ``group``, ``name``, ``status`` pass,
    fail, info or skip, ``figures``, ``detail``, ``seconds``), ``passed``, ``failed``,
    ``devices`` and ``finished``. ``device`` defaults to every GPU device; ``only`` picks
    groups (ops, training, memory, transfers, oom, speed). A failed check is a record, not
    an exception; each table line is logged at INFO on the ``espalier`` logger."""
