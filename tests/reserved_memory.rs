//! Reserved bytes (live plus a GPU pool's free buffers) beside live bytes, and a budget
//! that bounds them: the pool is trimmed before an allocation fails. On the CPU reserved
//! equals live. GPU checks skip, with the reason printed, where no GPU backend is present.

mod common;

use std::sync::Mutex;

use espalier::{DType, Device, Error, Tensor};

/// The trackers are per device and process: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;

fn f32s(bytes: usize, dev: Device) -> espalier::Result<Tensor> {
    Tensor::zeros(&[bytes / 4], DType::F32, dev)
}

#[test]
fn on_the_cpu_reserved_bytes_are_live_bytes() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = f32s(MIB, Device::Cpu).unwrap();
    let s = Device::Cpu.memory_stats().unwrap();
    assert_eq!(s.reserved, s.live);
    drop(t);
    let s = Device::Cpu.memory_stats().unwrap();
    assert_eq!(s.reserved, s.live);
    assert_eq!(Device::Cpu.trim_pool().unwrap(), 0);
}

#[test]
fn freed_gpu_buffers_stay_reserved_until_the_pool_is_trimmed() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::gpu_devices() {
        dev.trim_pool().unwrap();
        let before = dev.memory_stats().unwrap();
        assert_eq!(before.reserved, before.live, "{dev}: an empty pool");
        let t = f32s(MIB, dev).unwrap();
        let during = dev.memory_stats().unwrap();
        assert_eq!(during.live, before.live + MIB as u64);
        assert_eq!(during.reserved, before.reserved + MIB as u64);
        drop(t);
        let after = dev.memory_stats().unwrap();
        assert_eq!(after.live, before.live, "{dev}");
        assert_eq!(after.reserved, before.live + MIB as u64, "{dev}: pooled");
        assert!(after.peak_reserved >= after.reserved);
        // The pooled buffer serves the next request of its class: nothing new reserved.
        let again = f32s(MIB, dev).unwrap();
        assert_eq!(dev.memory_stats().unwrap().reserved, after.reserved);
        drop(again);
        assert_eq!(dev.trim_pool().unwrap(), MIB as u64);
        let trimmed = dev.memory_stats().unwrap();
        assert_eq!((trimmed.live, trimmed.reserved), (before.live, before.live));
    }
}

#[test]
fn a_gpu_budget_bounds_reserved_bytes_by_trimming_first() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::gpu_devices() {
        dev.trim_pool().unwrap();
        let live = dev.memory_stats().unwrap().live;
        let budget = live + (3 * MIB / 2) as u64;
        dev.set_memory_budget(Some(budget)).unwrap();
        let run = || -> espalier::Result<()> {
            drop(f32s(MIB, dev)?);
            // 1.25 MiB more would hold 2.25 MiB: the free 1 MiB buffer is freed first.
            let b = f32s(5 * MIB / 4, dev)?;
            let s = dev.memory_stats()?;
            assert_eq!(s.live, live + (5 * MIB / 4) as u64, "{dev}");
            assert!(
                s.reserved <= budget,
                "{dev}: {} reserved past {budget}",
                s.reserved
            );
            // Live bytes alone past the budget: a typed error.
            match f32s(MIB, dev) {
                Err(Error::OutOfMemory { requested, .. }) => {
                    assert_eq!(requested, MIB as u64)
                }
                other => panic!("{dev}: expected OutOfMemory, got {:?}", other.map(|_| ())),
            }
            drop(b);
            Ok(())
        };
        let r = run();
        dev.set_memory_budget(None).unwrap();
        r.unwrap();
        assert!(dev.memory_stats().unwrap().reserved <= budget);
    }
}
