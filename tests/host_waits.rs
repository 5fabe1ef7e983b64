//! `Device::host_waits` counts every blocking host wait of a device: none on the CPU, one
//! per readback or synchronisation on a GPU, and none where an op has what it needs on the
//! host already (indices uploaded from the host). GPU checks skip, with the reason
//! printed, where no GPU backend is present.

mod common;

use std::sync::{Arc, Mutex};

use espalier::nn::{Aggregator, SageLayer};
use espalier::rng::Rng;
use espalier::{ops, Device, Tensor};

/// The counters are per device and process: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn waits(dev: Device) -> u64 {
    dev.host_waits().unwrap()
}

/// Forward and backward of one SAGE layer with `aggr` on `dev`; returns the input's
/// gradient tensor (still on the device).
fn sage_step(aggr: Aggregator, dev: Device) -> Tensor {
    let mut rng = Rng::new(3);
    let layer = SageLayer::new(5, 4, aggr, &mut rng, dev).unwrap();
    let h = common::rand_f32(&[6, 5], 7)
        .to_device(dev)
        .unwrap()
        .requires_grad_leaf();
    let out = layer.forward(&common::small_block(), &h).unwrap();
    ops::sum_all(&out).unwrap().backward().unwrap();
    h.grad().unwrap()
}

#[test]
fn the_cpu_never_waits() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for aggr in [Aggregator::Mean, Aggregator::Lstm] {
        let g = sage_step(aggr, Device::Cpu);
        assert_eq!(g.to_vec_f32().unwrap().len(), 30);
        assert_eq!(waits(Device::Cpu), 0);
    }
}

#[test]
fn a_gpu_counts_one_wait_per_readback_and_per_sync() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::gpu_devices() {
        let w0 = waits(dev);
        let x = Tensor::from_f32(vec![-1.0, 2.0, -3.0, 4.0], &[4], dev).unwrap();
        let y = ops::relu(&x).unwrap();
        assert_eq!(
            waits(dev),
            w0,
            "{dev}: uploads and kernels wait for nothing"
        );
        assert_eq!(y.to_vec_f32().unwrap(), vec![0.0, 2.0, 0.0, 4.0]);
        assert_eq!(waits(dev), w0 + 1, "{dev}: one readback, one wait");
        dev.sync().unwrap();
        assert_eq!(waits(dev), w0 + 2, "{dev}: one sync, one wait");
        assert_eq!(ops::sum_all(&y).unwrap().item().unwrap(), 6.0);
        assert_eq!(waits(dev), w0 + 3, "{dev}: item reads back once");
    }
}

#[test]
fn index_select_with_uploaded_indices_waits_for_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let x = common::rand_f32(&[5, 3], 1);
    let idx = vec![4u32, 0, 4, 2];
    let want = ops::index_select(
        &x,
        &Tensor::from_u32(idx.clone(), &[4], Device::Cpu).unwrap(),
    )
    .unwrap()
    .to_vec_f32()
    .unwrap();
    for dev in common::gpu_devices() {
        let xd = x.clone().to_device(dev).unwrap().requires_grad_leaf();
        let i = Tensor::from_u32(idx.clone(), &[4], dev).unwrap();
        let w0 = waits(dev);
        let y = ops::index_select(&xd, &i).unwrap();
        ops::sum_all(&y).unwrap().backward().unwrap();
        assert_eq!(waits(dev), w0, "{dev}: gather and its scatter backward");
        assert_eq!(y.to_vec_f32().unwrap(), want);
        let g = xd.grad().unwrap().to_vec_f32().unwrap();
        assert_eq!(
            g,
            vec![1., 1., 1., 0., 0., 0., 1., 1., 1., 0., 0., 0., 2., 2., 2.]
        );
        // A bad uploaded index is still an error, found on the host copy.
        let bad = Tensor::from_u32(vec![0, 5], &[2], dev).unwrap();
        let w1 = waits(dev);
        assert!(ops::index_select(&xd, &bad).is_err());
        assert_eq!(waits(dev), w1, "{dev}: the range check reads the host copy");
        // Indices computed on the device have no host copy: they are read back once.
        let perm = Tensor::from_u32(vec![3, 2, 1, 0], &[4], dev).unwrap();
        let computed = ops::index_select(&i.view(&[4, 1]).unwrap(), &perm)
            .unwrap()
            .view(&[4])
            .unwrap();
        let w2 = waits(dev);
        let z = ops::index_select(&xd, &computed).unwrap();
        assert_eq!(
            waits(dev),
            w2 + 1,
            "{dev}: device-made indices are read back"
        );
        let rev: Vec<f32> = want.chunks(3).rev().flatten().copied().collect();
        assert_eq!(z.to_vec_f32().unwrap(), rev);
    }
}

#[test]
fn a_sage_lstm_step_on_a_gpu_waits_for_nothing_until_read() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cpu = sage_step(Aggregator::Lstm, Device::Cpu)
        .to_vec_f32()
        .unwrap();
    for dev in common::gpu_devices() {
        for aggr in [Aggregator::Mean, Aggregator::Lstm] {
            let w0 = waits(dev);
            let g = sage_step(aggr, dev);
            assert_eq!(waits(dev), w0, "{dev}: {aggr:?} forward and backward");
            let got = g.to_vec_f32().unwrap();
            assert_eq!(waits(dev), w0 + 1);
            if aggr == Aggregator::Lstm {
                common::assert_close("lstm input gradient", &cpu, &got, 1e-3, 1e-4);
            }
        }
    }
}

/// The trainer reports each epoch's host waits in its statistics (and so in `--json`):
/// none on the CPU; on a GPU the same count every epoch for the same work (full batch,
/// K = 2, evaluation every epoch), and at least one (the loss is read back).
#[test]
fn each_epoch_reports_its_host_waits() {
    use espalier::graph::{self, LoadOptions};
    use espalier::nn::ModelConfig;
    use espalier::train::{BatchSize, MicroConfig, TrainConfig, Trainer};
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load("synthetic:cora-like,scale=0.1", &LoadOptions::default()).unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    let mut devices = vec![Device::Cpu];
    devices.extend(common::gpu_devices());
    for dev in devices {
        let config = TrainConfig::default()
            .model(ModelConfig::default().hidden(8))
            .fanouts(vec![5, 5])
            .batch_size(BatchSize::Full)
            .epochs(3)
            .device(dev)
            .micro(MicroConfig {
                micro_batches: 2,
                ..MicroConfig::default()
            });
        let mut t = Trainer::new(&data, graph.clone(), config).unwrap();
        let s = t.run(None, &mut |_| {}).unwrap();
        let w: Vec<u64> = s.epochs.iter().map(|e| e.host_waits).collect();
        println!("{dev}: host waits per epoch {w:?}");
        if dev == Device::Cpu {
            assert_eq!(w, vec![0, 0, 0]);
        } else {
            assert!(w[1] > 0, "{dev}: the loss is read back at least once");
            assert_eq!(w[1], w[2], "{dev}: the same work waits as often");
        }
    }
}
