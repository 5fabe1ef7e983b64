//! Neural-network layers and models built from ops.

pub mod config;
pub mod gat;
pub mod gcn;
pub mod init;
pub mod layer;
pub mod linear;
pub mod mlp;
pub mod model;
pub mod module;
pub mod replay;
pub mod sage;

pub use config::{Forward, ModelConfig, ModelKind};
pub use gat::GatLayer;
pub use init::Init;
pub use layer::{
    BuildCtx, HybridLayer, HybridSpec, KindConfig, Layer, LayerAt, LayerSpec, ModelEntry,
};
pub use linear::Linear;
pub use mlp::Mlp;
pub use model::{Gnn, MODELS};
pub use module::{Activation, Module};
pub use sage::{Aggregator, LstmParams, SageLayer};
