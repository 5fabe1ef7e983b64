//! wgpu records ops into one command encoder and submits only when the host needs a result
//! (`Device::submits` counts submissions). Skips, with the reason printed, where no wgpu
//! adapter is present.

mod common;

use std::sync::{Arc, Mutex};

use espalier::graph::Block;
use espalier::nn::{Aggregator, Module, SageLayer};
use espalier::rng::Rng;
use espalier::{ops, Device, Tensor};

/// The counters are per device and process: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn submits(dev: Device) -> u64 {
    dev.submits().unwrap()
}

/// Layer 1: 6 src -> 3 dst; layer 2: 3 src -> 2 dst.
fn blocks() -> Vec<Arc<Block>> {
    vec![
        common::small_block(),
        Arc::new(Block::new(3, vec![0, 2, 4], vec![1, 2, 0, 2], vec![10, 11, 12]).unwrap()),
    ]
}

/// Forward, cross-entropy and backward of a 2-layer SAGE micro-batch on `dev`; returns the
/// loss and the first layer's parameters (their gradients set, on the device).
fn sage_micro_batch(aggr: Aggregator, dev: Device) -> (Tensor, Vec<Tensor>) {
    let mut rng = Rng::new(5);
    let l1 = SageLayer::new(5, 8, aggr, &mut rng, dev).unwrap();
    let l2 = SageLayer::new(8, 3, aggr, &mut rng, dev).unwrap();
    let b = blocks();
    let x = common::rand_f32(&[6, 5], 9).to_device(dev).unwrap();
    let y = Tensor::from_u32(vec![2, 0], &[2], dev).unwrap();
    let h = ops::relu(&l1.forward(&b[0], &x).unwrap()).unwrap();
    let logits = l2.forward(&b[1], &h).unwrap();
    let loss = ops::cross_entropy(&logits, &y, None).unwrap();
    loss.backward().unwrap();
    (loss, l1.parameters())
}

#[test]
fn a_sage_micro_batch_records_without_submitting_until_the_host_reads() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::wgpu_devices() {
        for aggr in [Aggregator::Mean, Aggregator::Lstm] {
            // Compile every pipeline first: a first use may read nothing back either.
            let (want, _) = sage_micro_batch(aggr, Device::Cpu);
            dev.sync().unwrap();
            let s0 = submits(dev);
            let (loss, params) = sage_micro_batch(aggr, dev);
            assert_eq!(
                submits(dev),
                s0,
                "{dev} {aggr:?}: forward and backward submit nothing"
            );
            let got = loss.item().unwrap();
            assert_eq!(submits(dev), s0 + 1, "{dev} {aggr:?}: one read, one submit");
            let w = want.item().unwrap();
            assert!((got - w).abs() <= 1e-5 * w.abs().max(1.0), "{got} vs {w}");
            for p in &params {
                p.grad().unwrap().to_vec_f32().unwrap();
            }
            assert_eq!(
                submits(dev),
                s0 + 1 + params.len() as u64,
                "{dev} {aggr:?}: each read submits once (nothing else was recorded)"
            );
        }
    }
}

#[test]
fn sync_submits_once_and_an_idle_sync_submits_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::wgpu_devices() {
        dev.sync().unwrap();
        let s0 = submits(dev);
        dev.sync().unwrap();
        assert_eq!(
            submits(dev),
            s0,
            "{dev}: nothing recorded, nothing submitted"
        );
        let x = Tensor::from_f32(vec![1.0, -2.0], &[2], dev).unwrap();
        let y = ops::relu(&ops::relu(&x).unwrap()).unwrap();
        assert_eq!(submits(dev), s0, "{dev}: kernels are recorded");
        dev.sync().unwrap();
        assert_eq!(submits(dev), s0 + 1, "{dev}: sync submits the recording");
        assert_eq!(y.to_vec_f32().unwrap(), vec![1.0, 0.0]);
    }
}

#[test]
fn an_upload_into_a_buffer_freed_during_the_recording_lands_after_the_recorded_reads() {
    // y = relu(x) is recorded, x dropped (its buffer back in the pool), then an upload of the
    // same size takes x's buffer: it must not land before relu has read x. Small uploads go
    // through the staging belt, large ones submit the recording first.
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::wgpu_devices() {
        for n in [4096, 3 << 20] {
            let vals: Vec<f32> = (0..n).map(|i| (i % 4001) as f32 - 2000.0).collect();
            let want: Vec<f32> = vals.iter().map(|v| v.max(0.0)).collect();
            for _ in 0..3 {
                let x = Tensor::from_f32(vals.clone(), &[n], dev).unwrap();
                dev.sync().unwrap();
                let y = ops::relu(&x).unwrap();
                drop(x);
                let z = Tensor::from_f32(vec![-7.0; n], &[n], dev).unwrap();
                assert!(y.to_vec_f32().unwrap() == want, "{dev}: n = {n}");
                assert!(z.to_vec_f32().unwrap() == vec![-7.0; n], "{dev}: n = {n}");
            }
        }
    }
}

#[test]
fn the_cpu_and_cuda_report_no_submits() {
    assert_eq!(Device::Cpu.submits().unwrap(), 0);
}

#[test]
fn a_training_epoch_waits_and_submits_per_batch_not_per_micro_batch() {
    use espalier::graph::{self, LoadOptions};
    use espalier::nn::ModelConfig;
    use espalier::train::{BatchSize, MicroConfig, TrainConfig, Trainer};
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load("synthetic:cora-like,scale=0.1", &LoadOptions::default()).unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    for dev in std::iter::once(Device::Cpu).chain(common::wgpu_devices()) {
        // (submits, host waits, loss) of the second epoch.
        let run = |k: usize, profile: bool| {
            let config = TrainConfig::default()
                .model(ModelConfig::default().hidden(8))
                .fanouts(vec![5, 5])
                .batch_size(BatchSize::Full)
                .epochs(2)
                .eval_every(0)
                .device(dev)
                .profile(profile)
                .micro(MicroConfig {
                    micro_batches: k,
                    ..MicroConfig::default()
                });
            let mut t = Trainer::new(&data, graph.clone(), config).unwrap();
            let s = t.run(None, &mut |_| {}).unwrap();
            let e = &s.epochs[1];
            (e.submits, e.host_waits, e.loss)
        };
        let (k1, k4, k4p) = (run(1, false), run(4, false), run(4, true));
        println!("{dev}: (submits, waits, loss) K=1 {k1:?}, K=4 {k4:?}, K=4 profiled {k4p:?}");
        if dev == Device::Cpu {
            assert_eq!((k1.0, k1.1, k4.0, k4.1), (0, 0, 0, 0));
            continue;
        }
        // The batch's losses and predictions are read once each at its end, whatever K.
        assert_eq!((k1.0, k1.1), (2, 2), "{dev}: K=1");
        assert_eq!((k4.0, k4.1), (2, 2), "{dev}: K=4");
        // Profiling waits after forward, backward (per micro-batch) and the step.
        assert_eq!(k4p.1, 2 + 2 * 4 + 1, "{dev}: K=4 profiled");
        assert_eq!(k4.2, k4p.2, "{dev}: profiling does not change the loss");
    }
}

#[test]
fn a_launch_with_another_shaders_params_is_an_error_naming_both() {
    use espalier::device::wgpu::{self as backend, BinaryParams, Kernel, UnaryParams};
    for dev in common::wgpu_devices() {
        let Device::Wgpu(i) = dev else { continue };
        let ctx = backend::context(i).unwrap();
        let k = Kernel {
            stem: "unary",
            source: include_str!("../shaders/unary.wgsl"),
            entry: "unary_f32",
        };
        let x = Tensor::from_f32(vec![1.0; 4], &[4], dev).unwrap();
        let storage = x.storage();
        let espalier::tensor::Storage::Wgpu(b) = &*storage else {
            unreachable!()
        };
        let e = ctx
            .launch(&k, &BinaryParams::default(), &[(1, b), (2, b)], 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unary::unary_f32") && e.contains("shaders/binary.wgsl"),
            "{e}"
        );
        // The matching struct is accepted.
        ctx.launch(&k, &UnaryParams::default(), &[(1, b)], 0)
            .unwrap();
    }
}
