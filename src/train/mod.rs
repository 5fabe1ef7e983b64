//! Training: optimizers, and (with the graph machinery) the trainer.

pub mod checkpoint;
pub mod optim;
pub mod trainer;

pub use optim::{Adam, Optimizer, Sgd};
pub use trainer::{BatchSize, EpochStats, OptimizerKind, Summary, TrainConfig, Trainer};
