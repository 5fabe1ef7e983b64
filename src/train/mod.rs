//! Training: optimizers, and (with the graph machinery) the trainer.

pub mod checkpoint;
pub mod features;
pub mod full_graph;
pub mod micro;
pub mod optim;
pub mod row_reuse;
pub mod schedule;
pub mod trainer;

pub use features::{gather_host, FeatureDType, FeaturePlacement, FeatureStore};
pub use full_graph::{FullGraphConfig, FullGraphStats, LayerRows, NodeOrder};
pub use micro::{Loader, MicroConfig, SAFETY_MARGIN};
pub use optim::{Adam, Optimizer, Sgd};
pub use row_reuse::Dedup;
pub use schedule::LrSchedule;
pub use trainer::{
    gather_rows, BatchSize, EpochStats, OnNan, OptimizerKind, Phases, Summary, TrainConfig, Trainer,
};
