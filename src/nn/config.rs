//! The plain types a model is described by: which kind ([`ModelKind`]), the shape every
//! kind shares ([`ModelShape`]), and the per-call state of a forward pass ([`Forward`]).
//! They sit below the layers and the model: every layer file and `model.rs` read them, and
//! this file reads none of those. Each kind's own settings are its config type, in the
//! kind's file (`SageConfig` in `sage.rs`, `GcnConfig`, `GatConfig`); the whole
//! configuration, shape and settings, is `ModelConfig` in `model.rs`.

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

/// What every model kind shares: its widths, depth and the dropout between layers.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelShape {
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
}

impl Default for ModelShape {
    /// The CLI's defaults: 2 layers, hidden 256, dropout 0.5. `in_dim` and `out_dim` are 0:
    /// set them, or let `Trainer::new` take them from the dataset.
    fn default() -> Self {
        ModelShape {
            in_dim: 0,
            hidden: 256,
            out_dim: 0,
            layers: 2,
            dropout: 0.5,
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
