//! The plain types a model is described by: which kind ([`ModelKind`]), its shape
//! ([`ModelConfig`], with SAGE's [`Aggregator`] among the flat fields), and the per-call
//! state of a forward pass ([`Forward`]). They sit below the layers and the model: every
//! layer file and `model.rs` read them, and this file reads none of those. What needs the
//! registry of kinds (names, parsing, validation, the layer specs) is in `model.rs`;
//! `Aggregator`'s names and parsing are in `sage.rs`.

/// Which GNN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// GraphSAGE (`--aggr` picks the aggregator).
    Sage,
    /// GCN, normalised with the graph's degrees.
    Gcn,
    /// GAT, multi-head attention.
    Gat,
}

/// How a SAGE layer aggregates its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregator {
    /// Mean of the neighbours.
    Mean,
    /// Sum of the neighbours.
    Sum,
    /// Element-wise max of the neighbours after a linear layer and ReLU (DGL's `pool`).
    Pool,
    /// Element-wise max of the neighbours' features themselves (PyG's `max`; 0 for a node
    /// without neighbours).
    Max,
    /// An LSTM over the neighbours.
    Lstm,
}

/// Shape of a model, as the CLI flags, the JSON output and checkpoints carry it: the
/// widths every kind shares, plus each kind's own settings flat beside them (so old JSON
/// and checkpoints compare field by field). A kind's layers never read this struct for
/// their own settings: they read their kind's config type ([`ModelConfig::kind_config`]:
/// `SageConfig`, `GcnConfig`, `GatConfig`), built from it by the kind's registry entry.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelConfig {
    /// Which model.
    pub kind: ModelKind,
    /// SAGE's neighbour aggregator (read into `SageConfig`; ignored by GCN and GAT).
    pub aggr: Aggregator,
    /// Input feature width.
    pub in_dim: usize,
    /// Hidden width (per head for GAT).
    pub hidden: usize,
    /// Output width: the number of classes.
    pub out_dim: usize,
    /// Number of layers (one per fanout).
    pub layers: usize,
    /// Dropout probability between layers.
    pub dropout: f64,
    /// GAT (read into `GatConfig`): attention heads of the hidden layers (the output
    /// layer has one).
    pub heads: usize,
    /// GAT: dropout on the attention weights (0 in the PyG peer).
    pub attn_dropout: f64,
    /// GAT: add a self-loop to every dst node without one (PyG's default).
    pub self_loops: bool,
}

impl Default for ModelConfig {
    /// The CLI's defaults: GraphSAGE-mean, 2 layers, hidden 256, dropout 0.5 (GAT: 4
    /// heads, no attention dropout, self-loops). `in_dim` and `out_dim` are 0: set them, or
    /// let `Trainer::new` take them from the dataset.
    fn default() -> Self {
        ModelConfig {
            kind: ModelKind::Sage,
            aggr: Aggregator::Mean,
            in_dim: 0,
            hidden: 256,
            out_dim: 0,
            layers: 2,
            dropout: 0.5,
            heads: 4,
            attn_dropout: 0.0,
            self_loops: true,
        }
    }
}

/// Per-call state of a forward pass.
#[derive(Clone, Debug, Default)]
pub struct Forward {
    /// Dropout on.
    pub training: bool,
    /// Seed of the dropout masks.
    pub seed: u64,
    /// Epoch (dropout masks change every epoch).
    pub epoch: u64,
}
