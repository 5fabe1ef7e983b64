//! Sizes from user input never abort the process: model widths are checked before anything
//! is allocated, a CPU allocation the system refuses is `Error::OutOfMemory`, and the
//! memory accounting and estimator saturate instead of overflowing.

use espalier::device::{cpu, size_class, MemoryTracker};
use espalier::error::NO_BUDGET;
use espalier::graph::BlockSizes;
use espalier::nn::model::MAX_PARAMETER_VALUES;
use std::sync::Arc;

use espalier::nn::{
    Aggregator, GatConfig, GcnConfig, Gnn, KindConfig, ModelConfig, ModelKind, ModelShape, Module,
    SageConfig,
};
use espalier::train::{MemoryEstimator, Resident};
use espalier::{DType, Device, Error, Tensor};

/// The CPU's memory tracker is one per process: tests of this binary that allocate on the
/// CPU, or read its live bytes, run one at a time.
static CPU_TRACKER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    CPU_TRACKER.lock().unwrap_or_else(|e| e.into_inner())
}

fn config(kind: ModelKind, aggr: Aggregator) -> ModelConfig {
    config_with_heads(kind, aggr, 2)
}

/// [`config`] with `heads` GAT heads.
fn config_with_heads(kind: ModelKind, aggr: Aggregator, heads: usize) -> ModelConfig {
    let settings: Arc<dyn KindConfig> = match kind {
        ModelKind::Sage => Arc::new(SageConfig { aggr }),
        ModelKind::Gcn => Arc::new(GcnConfig),
        ModelKind::Gat => Arc::new(GatConfig {
            heads,
            ..GatConfig::default()
        }),
    };
    let shape = ModelShape {
        in_dim: 7,
        hidden: 5,
        out_dim: 3,
        layers: 3,
        dropout: 0.5,
    };
    ModelConfig::with_settings(shape, settings)
}

const KINDS: [(ModelKind, Aggregator); 7] = [
    (ModelKind::Sage, Aggregator::Mean),
    (ModelKind::Sage, Aggregator::Sum),
    (ModelKind::Sage, Aggregator::Pool),
    (ModelKind::Sage, Aggregator::Max),
    (ModelKind::Sage, Aggregator::Lstm),
    (ModelKind::Gcn, Aggregator::Mean),
    (ModelKind::Gat, Aggregator::Mean),
];

#[test]
fn parameter_shapes_computed_from_widths_match_the_built_model() {
    let _cpu = serial();
    for (kind, aggr) in KINDS {
        let c = config(kind, aggr);
        let model = Gnn::new(c.clone(), Some(&[1, 2, 3]), 0, Device::Cpu).unwrap();
        let mut built: Vec<Vec<u64>> = model
            .parameters()
            .iter()
            .map(|p| p.shape().iter().map(|&d| d as u64).collect())
            .collect();
        let mut declared: Vec<Vec<u64>> = c
            .parameter_shapes()
            .unwrap()
            .into_iter()
            .map(|(_, _, s)| s)
            .collect();
        built.sort();
        declared.sort();
        assert_eq!(declared, built, "{kind:?}/{aggr:?}");
        assert_eq!(
            c.num_parameters().unwrap(),
            model.num_parameters() as u64,
            "{kind:?}/{aggr:?}"
        );
    }
}

#[test]
fn widths_past_the_tensor_limit_fail_validation_before_any_allocation() {
    let _cpu = serial();
    let live = Device::Cpu.memory().unwrap().live();
    for (kind, aggr) in KINDS {
        for (hidden, heads, classes) in [
            (1_000_000_000, 2, 3),
            (5, 1_000_000_000, 3),
            (5, 2, 4_000_000_000),
            (usize::MAX, usize::MAX, usize::MAX),
        ] {
            let mut c = config_with_heads(kind, aggr, heads);
            c.shape.in_dim = 1433;
            (c.shape.hidden, c.shape.out_dim) = (hidden, classes);
            if kind != ModelKind::Gat && hidden == 5 && classes == 3 {
                continue; // heads mean nothing to this model
            }
            let e = c.validate().unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument(ref m) if m.contains("too large")),
                "{kind:?}/{aggr:?} {hidden} {heads} {classes}: {e}"
            );
            let e = Gnn::new(c, Some(&[1]), 0, Device::Cpu).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
    }
    assert_eq!(
        Device::Cpu.memory().unwrap().live(),
        live,
        "nothing was allocated"
    );
    // At the limit itself a tensor is fine to describe.
    let mut c = config(ModelKind::Gcn, Aggregator::Mean);
    (c.shape.in_dim, c.shape.hidden, c.shape.layers) = (1, MAX_PARAMETER_VALUES as usize, 1);
    c.shape.out_dim = MAX_PARAMETER_VALUES as usize;
    assert!(c.validate().is_ok());
}

#[test]
fn a_cpu_allocation_the_system_refuses_is_out_of_memory() {
    let _cpu = serial();
    // 2^52 bytes: more than a 48-bit address space can map, whatever the overcommit mode.
    let e = Tensor::zeros(&[1 << 50], DType::F32, Device::Cpu).unwrap_err();
    match e {
        Error::OutOfMemory {
            device,
            requested,
            budget,
            ..
        } => {
            assert_eq!(device, Device::Cpu);
            assert_eq!(requested, 1 << 52);
            assert_eq!(budget, NO_BUDGET);
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert!(e_text().contains("the system refused"));
    assert!(cpu::try_vec::<f32>(1 << 50).is_err());
    // A shape whose value count overflows is an error too.
    assert!(Tensor::zeros(&[1 << 40, 1 << 40], DType::F32, Device::Cpu).is_err());
    assert!(Tensor::from_f32(vec![], &[usize::MAX, 2], Device::Cpu).is_err());
}

fn e_text() -> String {
    Tensor::zeros(&[1 << 50], DType::F32, Device::Cpu)
        .unwrap_err()
        .to_string()
}

#[test]
fn accounting_saturates_instead_of_overflowing() {
    let _cpu = serial();
    static T: MemoryTracker = MemoryTracker::new(Device::Cpu);
    let a = T.alloc(u64::MAX - 1).unwrap();
    let b = T.alloc(10).unwrap();
    assert_eq!(T.live(), u64::MAX);
    drop((a, b));
    T.set_budget(Some(100));
    let _c = T.alloc(50).unwrap();
    assert!(matches!(T.alloc(u64::MAX), Err(Error::OutOfMemory { .. })));
    assert_eq!(size_class(u64::MAX), u64::MAX);
}

#[test]
fn the_estimator_saturates_on_absurd_widths() {
    let _cpu = serial();
    let mut c = config(ModelKind::Sage, Aggregator::Lstm);
    (
        c.shape.in_dim,
        c.shape.hidden,
        c.shape.out_dim,
        c.shape.layers,
    ) = (usize::MAX / 2, usize::MAX / 2, 3, 2);
    let e = MemoryEstimator::new(c, Device::Wgpu(0), 2);
    let sizes = BlockSizes {
        num_src: usize::MAX / 4,
        num_dst: 1,
        num_edges: 1,
        degree_hist: vec![0, 1],
        self_loops: 0,
    };
    let next = BlockSizes {
        num_src: 1,
        ..sizes.clone()
    };
    assert_eq!(e.resident_bytes(Resident::STEADY), u64::MAX);
    let peak = e
        .peak_bytes(&[sizes, next], 1, 0, Resident::STEADY)
        .unwrap();
    assert_eq!(peak, u64::MAX);
}
