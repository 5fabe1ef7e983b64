//! Neural-network layers and models built from ops.

pub mod init;
pub mod linear;
pub mod mlp;
pub mod module;

pub use init::Init;
pub use linear::Linear;
pub use mlp::Mlp;
pub use module::{Activation, Module};
