//! Training: optimizers, and (with the graph machinery) the trainer.

pub mod checkpoint;
pub mod features;
pub mod micro;
pub mod optim;
pub mod trainer;

pub use features::{gather_host, FeatureDType, FeatureStore};
pub use micro::{MicroConfig, SAFETY_MARGIN};
pub use optim::{Adam, Optimizer, Sgd};
pub use trainer::{
    gather_rows, BatchSize, EpochStats, OptimizerKind, Phases, Summary, TrainConfig, Trainer,
};
