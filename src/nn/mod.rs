//! Neural-network layers and models built from ops.

pub mod config;
pub mod exec;
pub mod gat;
pub mod gcn;
pub mod init;
pub mod kind;
pub mod layer;
pub mod linear;
pub mod mlp;
pub mod model;
pub mod module;
pub mod sage;

pub use config::{Forward, ModelKind, ModelShape};
pub use gat::{GatConfig, GatLayer};
pub use gcn::GcnConfig;
pub use init::Init;
pub use kind::{Hybrid, KindConfig, ModelEntry, ModelFlags, WidthFlag};
pub use layer::{BuildCtx, HybridEager, HybridLayer, HybridTrace, Layer, LayerAt, LayerSpec};
pub use linear::Linear;
pub use mlp::Mlp;
pub use model::{hybrid_models, model_flags, Gnn, ModelConfig, MODELS};
pub use module::{Activation, Module};
pub use sage::{Aggregator, LstmParams, SageConfig, SageLayer};
