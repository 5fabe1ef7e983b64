//! Training: optimizers, and (with the graph machinery) the trainer.

pub mod optim;

pub use optim::{Adam, Optimizer, Sgd};
