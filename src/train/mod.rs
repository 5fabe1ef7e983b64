//! Training: optimizers, and (with the graph machinery) the trainer.

pub mod checkpoint;
pub mod config;
pub mod estimate;
pub mod features;
pub(crate) mod feed;
pub mod full_graph;
mod held;
pub mod inference;
pub mod micro;
pub mod optim;
pub mod row_reuse;
pub mod schedule;
pub(crate) mod source;
pub mod state;
pub mod stats;
pub(crate) mod step;
pub mod trainer;

pub use config::{
    BatchSize, FullGraphConfig, Loader, MicroConfig, NodeOrder, OnNan, OptimizerKind, TrainConfig,
    SAFETY_MARGIN,
};
pub use estimate::{ChunkPass, MemoryEstimator, Resident};
pub use features::{gather_host, FeatureDType, FeaturePlacement, FeatureStore};
pub use optim::{Adam, Optimizer, Sgd};
pub use row_reuse::Dedup;
pub use schedule::LrSchedule;
pub use state::State;
pub use stats::{ChunkStats, EpochStats, FullGraphStats, LayerRows, Phases, Summary};
pub use trainer::{gather_rows, Trainer};
