//! `--features device`: the feature matrix uploaded once and each micro-batch's rows
//! gathered on the device by id give the same training as gathering on the host and
//! uploading the rows (the rows are the same bits), in every storage precision, on every GPU
//! backend present. Skips, with the reason printed, where none is.
//!
//! Under a budget the matrix counts as resident: `auto` leaves it on the host when it would
//! take more than half the room the model's state leaves, `device` refuses what does not fit.

mod common;

use std::sync::{Arc, Mutex};

use espalier::graph::{self, Dataset, LoadOptions};
use espalier::nn::ModelConfig;
use espalier::train::{
    BatchSize, FeatureDType, FeaturePlacement, MicroConfig, Summary, TrainConfig, Trainer,
};
use espalier::{ops, Device, Tensor};

/// The device trackers are per process: a test under a budget must not see another's
/// tensors, so these tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn run(data: &Dataset, dev: Device, dtype: FeatureDType, place: FeaturePlacement) -> Summary {
    let graph = Arc::new(data.graph.symmetrize());
    let config = TrainConfig::default()
        .model(ModelConfig::default().hidden(8))
        .fanouts(vec![5, 5])
        .batch_size(BatchSize::Full)
        .epochs(2)
        .eval_every(1)
        .device(dev)
        .feature_dtype(dtype)
        .feature_placement(place)
        .micro(MicroConfig {
            micro_batches: 3,
            ..MicroConfig::default()
        });
    let mut t = Trainer::new(data, graph, config).unwrap();
    t.run(None, &mut |_| {}).unwrap()
}

fn losses(s: &Summary) -> Vec<f64> {
    s.epochs.iter().map(|e| e.loss).collect()
}

#[test]
fn device_resident_features_train_exactly_as_host_gathered_ones() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // An even feature width: half-precision rows gather as pairs of values.
    let data = graph::load(
        "synthetic:cora-like,scale=0.1,feat_dim=16",
        &LoadOptions::default(),
    )
    .unwrap();
    let mut devices = vec![Device::Cpu];
    devices.extend(common::gpu_devices());
    for dev in devices {
        for dtype in [FeatureDType::F32, FeatureDType::BF16] {
            let host = run(&data, dev, dtype, FeaturePlacement::Host);
            let device = run(&data, dev, dtype, FeaturePlacement::Device);
            assert!(!host.features_on_device);
            // On the CPU host and device are one: the matrix stays where it is.
            assert_eq!(device.features_on_device, dev != Device::Cpu, "{dev}");
            assert_eq!(losses(&host), losses(&device), "{dev} {dtype:?}");
            assert_eq!(host.test_acc, device.test_acc, "{dev} {dtype:?}");
            // Auto puts it on the device where there is one and no budget says otherwise.
            let auto = run(&data, dev, dtype, FeaturePlacement::Auto);
            assert_eq!(auto.features_on_device, dev != Device::Cpu, "{dev}");
        }
    }
}

#[test]
fn an_odd_width_half_matrix_stays_on_the_host_under_auto_and_is_refused_under_device() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load(
        "synthetic:cora-like,scale=0.1,feat_dim=15",
        &LoadOptions::default(),
    )
    .unwrap();
    for dev in common::gpu_devices() {
        let auto = run(&data, dev, FeatureDType::F16, FeaturePlacement::Auto);
        assert!(!auto.features_on_device, "{dev}");
        let graph = Arc::new(data.graph.symmetrize());
        let config = TrainConfig::default()
            .device(dev)
            .feature_dtype(FeatureDType::F16)
            .feature_placement(FeaturePlacement::Device);
        let e = Trainer::new(&data, graph, config)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--features device") && e.contains("odd width"),
            "{e}"
        );
    }
}

#[test]
fn half_precision_rows_gather_on_every_gpu_bit_for_bit() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let v: Vec<f32> = common::rand_f32(&[7 * 6], 3).to_vec_f32().unwrap();
    let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
    let b: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let ids = vec![6u32, 0, 3, 3, 1];
    for t in [
        Tensor::from_f16(h, &[7, 6], Device::Cpu).unwrap(),
        Tensor::from_bf16(b, &[7, 6], Device::Cpu).unwrap(),
    ] {
        let idx = Tensor::from_u32(ids.clone(), &[5], Device::Cpu).unwrap();
        let want = ops::widen(&ops::index_select(&t, &idx).unwrap())
            .unwrap()
            .to_vec_f32()
            .unwrap();
        for dev in common::gpu_devices() {
            let td = t.clone().to_device(dev).unwrap();
            let got = ops::index_select(&td, &idx.clone().to_device(dev).unwrap()).unwrap();
            assert_eq!((got.dtype(), got.shape()), (t.dtype(), &[5, 6][..]));
            let got = ops::widen(&got).unwrap().to_vec_f32().unwrap();
            assert!(got == want, "{dev} {:?}: {got:?} vs {want:?}", t.dtype());
            // An odd width would split a word: a clear error, not a wrong gather.
            let odd = Tensor::from_f16(vec![half::f16::ONE; 7 * 5], &[7, 5], dev).unwrap();
            let e = ops::index_select(&odd, &idx.clone().to_device(dev).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("even width"), "{dev}: {e}");
        }
    }
}

#[test]
fn under_a_budget_auto_keeps_half_the_room_and_device_refuses_what_does_not_fit() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use espalier::train::Resident;
    let data = graph::load(
        "synthetic:cora-like,scale=0.1,feat_dim=16",
        &LoadOptions::default(),
    )
    .unwrap();
    for dev in common::gpu_devices() {
        let graph = Arc::new(data.graph.symmetrize());
        let config = |place, budget| {
            TrainConfig::default()
                .model(ModelConfig::default().hidden(8))
                .device(dev)
                .feature_placement(place)
                .micro(MicroConfig {
                    memory_budget: budget,
                    ..MicroConfig::default()
                })
        };
        let t = Trainer::new(&data, graph.clone(), config(FeaturePlacement::Host, None)).unwrap();
        let resident = t.state.estimator.resident_bytes(Resident::STEADY);
        let matrix = t.state.estimator.rounded(t.state.features.bytes() as u64);
        drop(t);
        // Room for the matrix, but not twice over: auto keeps it on the host, device takes it.
        let budget = Some(resident + matrix * 3 / 2);
        let auto = Trainer::new(&data, graph.clone(), config(FeaturePlacement::Auto, budget));
        assert!(auto.unwrap().state.resident_features.is_none(), "{dev}");
        let device = Trainer::new(
            &data,
            graph.clone(),
            config(FeaturePlacement::Device, budget),
        );
        let device = device.unwrap();
        assert!(device.state.resident_features.is_some(), "{dev}");
        // The estimator counts the resident matrix.
        assert_eq!(
            device.state.estimator.resident_bytes(Resident::STEADY),
            resident + matrix
        );
        drop(device);
        // No room: device is an error that says why.
        let budget = Some(resident + matrix / 2);
        let e = Trainer::new(&data, graph, config(FeaturePlacement::Device, budget))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--features device") && e.contains("memory budget"),
            "{e}"
        );
    }
}
