//! Exact memory accounting on the CPU backend. The CPU tracker is process-wide, so these
//! tests live in their own binary and take a lock against each other.

use std::sync::{Arc, Mutex};

use espalier::graph::{sample_blocks, synth::SynthSpec, Block, Buckets};
use espalier::meta::Replay;
use espalier::nn::{Activation, Mlp, Module};
use espalier::rng::Rng;
use espalier::{ops, DType, Device, Error, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn live() -> u64 {
    Device::Cpu.memory_stats().unwrap().live
}

#[test]
fn backward_frees_activations_leaving_parameters_and_gradients() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = live();
    let mut rng = Rng::new(1);
    let mlp = Mlp::new(&[16, 64, 64, 3], Activation::Relu, &mut rng, Device::Cpu).unwrap();
    let param_bytes: u64 = mlp.parameters().iter().map(|p| p.bytes() as u64).sum();
    let x = Tensor::from_f32(
        (0..256 * 16).map(|i| (i % 7) as f32 * 0.1).collect(),
        &[256, 16],
        Device::Cpu,
    )
    .unwrap();
    let x_bytes = x.bytes() as u64;
    assert_eq!(live(), base + param_bytes + x_bytes);

    Device::Cpu.memory().unwrap().reset_peak();
    let loss = ops::mean_all(&ops::tanh(&mlp.forward(&x).unwrap()).unwrap()).unwrap();
    let during = live();
    assert!(
        during > base + param_bytes + x_bytes + 256 * 64 * 4,
        "activations are live before backward"
    );
    loss.backward().unwrap();
    drop(loss);
    assert_eq!(
        live(),
        base + 2 * param_bytes + x_bytes,
        "after backward only parameters, their gradients and the input remain"
    );
    assert!(Device::Cpu.memory_stats().unwrap().peak >= during);
    for p in mlp.parameters() {
        assert_eq!(p.grad().unwrap().shape(), p.shape());
    }
    // Gradients accumulate in place across backward calls: no extra bytes stay live.
    let loss = ops::mean_all(&ops::tanh(&mlp.forward(&x).unwrap()).unwrap()).unwrap();
    loss.backward().unwrap();
    drop(loss);
    assert_eq!(live(), base + 2 * param_bytes + x_bytes);
    mlp.zero_grad();
    assert_eq!(live(), base + param_bytes + x_bytes);
}

#[test]
fn allocation_past_budget_is_a_typed_error_and_the_device_stays_usable() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem = Device::Cpu.memory().unwrap();
    let a = Tensor::zeros(&[1024], DType::F32, Device::Cpu).unwrap();
    let live_before = live();
    mem.set_budget(Some(live_before + 8192));
    let err = Tensor::zeros(&[4096], DType::F32, Device::Cpu).unwrap_err();
    match err {
        Error::OutOfMemory {
            device,
            requested,
            live,
            budget,
        } => {
            assert_eq!(device, Device::Cpu.to_string());
            assert_eq!(requested, 16384);
            assert_eq!(live, live_before);
            assert_eq!(budget, live_before + 8192);
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    // An op whose output does not fit fails the same way, before computing anything.
    let big = ops::expand_dim(
        &ops::sum_dim(&a.view(&[1, 1024]).unwrap(), 0).unwrap(),
        0,
        64,
    );
    assert!(matches!(big, Err(Error::OutOfMemory { .. })));
    assert_eq!(
        live(),
        live_before,
        "a failed allocation leaves nothing behind"
    );
    // Still usable under the budget, and fully usable once it is lifted.
    let small = ops::relu(&a).unwrap();
    assert_eq!(small.numel(), 1024);
    drop(small);
    mem.set_budget(None);
    assert!(Tensor::zeros(&[4096], DType::F32, Device::Cpu).is_ok());
}

/// Values in [-0.3, 0.3).
fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i % 13) as f32 * 0.05 - 0.3).collect()
}

/// The LSTM's inputs over `plan`: `xw [ns, 4h]` and `w_hh [h, 4h]` needing gradients, and
/// the plan's index.
fn lstm_inputs(plan: &ops::LstmPlan, ns: usize, h: usize) -> (Tensor, Tensor, Tensor) {
    let leaf = |shape: &[usize]| {
        Tensor::from_f32(values(shape.iter().product()), shape, Device::Cpu)
            .unwrap()
            .requires_grad_leaf()
    };
    let idx = Tensor::from_u32(plan.src.clone(), &[plan.rows()], Device::Cpu).unwrap();
    (leaf(&[ns, 4 * h]), leaf(&[h, 4 * h]), idx)
}

/// The LSTM aggregation's forward on the CPU allocates what the estimator's replay of it
/// says: the tracker's peak and live bytes when the forward ends, over those live before
/// it, equal the replay's to the byte (gates, cell states, output, and each packed step's
/// next hidden state beside the previous one). A training step's CPU peak lies in the
/// LSTM's backward, so the exact-peak tests of the estimator (`estimator_aggr.rs`) pass
/// whatever the forward's replay allocates below it; this pins the forward itself.
#[test]
fn lstm_forward_allocates_what_its_replay_says() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = SynthSpec::parse("cora-like").unwrap().generate().unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(300).collect();
    let blocks = sample_blocks(&data.graph, &seeds, &[10], 1).unwrap();
    let b = &blocks[0];
    let plan = Arc::new(ops::LstmPlan::new(b, &Buckets::new(b, None)).unwrap());
    let (ns, h, rows) = (b.num_src, 16, plan.rows());
    assert!(plan.buckets.len() > 3, "{} buckets", plan.buckets.len());
    let (xw, w, idx) = lstm_inputs(&plan, ns, h);

    let mem = Device::Cpu.memory().unwrap();
    let base = live();
    mem.reset_peak();
    let out = ops::lstm_aggregate(&xw, &idx, &w, &plan).unwrap();
    let measured = (mem.peak() - base, live() - base);
    drop(out);

    let mut r = Replay::of(Device::Cpu.alloc_policy());
    let (xr, ir, wr) = (r.leaf_input(ns, 4 * h), r.input(rows, 1), r.param(h, 4 * h));
    let before = r.live();
    let buckets = plan.buckets.iter().map(|p| (p.dst.len(), p.degree));
    ops::meta_lstm_aggregate(&mut r, &xr, &ir, &wr, b.num_dst, buckets.collect());
    let replayed = (r.peak() - before, r.live() - before);
    assert_eq!(
        measured, replayed,
        "LSTM forward (peak, live after) over {rows} rows: measured vs replayed"
    );
}

/// The LSTM aggregation's backward on the CPU holds what its replay says, to the byte, on a
/// block whose src rows far outnumber its edges (3,000 src rows, 1,500 dst nodes, 100
/// edges), so that the moment the rows' gradient is scattered into the src rows' is the
/// backward's peak: the scatter runs as a step of its own after the op's rule, when the
/// op's incoming gradient `[dst, H]` (here of a scaling after the op) is already gone (a
/// replay that scatters inside the rule, with that gradient still held, counts it in the
/// peak).
#[test]
fn lstm_backward_holds_what_its_replay_says() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, nd, h) = (3000, 1500, 8);
    let mut indptr: Vec<u32> = (0..=50).map(|d| 2 * d).collect();
    indptr.resize(nd + 1, 100);
    let indices = (0..100).map(|e| (e * 29 + 7) % ns as u32).collect();
    let b = Block::new(ns, indptr, indices, (0..ns as u32).collect()).unwrap();
    let plan = Arc::new(ops::LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap());
    let rows = plan.rows();
    let (xw, w, idx) = lstm_inputs(&plan, ns, h);
    // Scaled, so that the LSTM's incoming gradient is a buffer of autograd's own.
    let out = ops::lstm_aggregate(&xw, &idx, &w, &plan).unwrap();
    let y = ops::mul_scalar(&out, 2.0).unwrap();
    let g = Tensor::from_f32(values(nd * h), &[nd, h], Device::Cpu).unwrap();

    let mem = Device::Cpu.memory().unwrap();
    let base = live();
    mem.reset_peak();
    espalier::autograd::backward_with(&y, &g).unwrap();
    let measured = (mem.peak() - base, live() - base);
    drop((out, y, g));

    let mut r = Replay::of(Device::Cpu.alloc_policy());
    let (xr, ir, wr) = (r.leaf_input(ns, 4 * h), r.input(rows, 1), r.param(h, 4 * h));
    let buckets = plan.buckets.iter().map(|p| (p.dst.len(), p.degree));
    let out = ops::meta_lstm_aggregate(&mut r, &xr, &ir, &wr, nd, buckets.collect());
    let y = ops::meta_unary(&mut r, &out);
    let seed = r.input(nd, h);
    let before = r.live();
    r.reset_peak();
    r.backward(&y, Some(seed.buf));
    let replayed = (r.peak() - before, r.live() - before);
    assert_eq!(
        measured, replayed,
        "LSTM backward (peak, live after) over {rows} rows: measured vs replayed"
    );
}
