//! `espalier check`: does a device compute what the CPU computes, and how fast?
//!
//! Every check compares a GPU device with the CPU reference backend and returns a
//! [`Record`]: pass or fail with the figures behind the verdict (the largest error against
//! its tolerance, the losses of both runs, the estimate against the measured peak), or a
//! figure alone (the microbenchmarks). The groups, in the order they run:
//!
//! - [`ops`]: every op's forward and backward on seeded inputs whose sizes cross the
//!   boundaries kernels get wrong (empty rows, one-edge rows, rows longer than a workgroup,
//!   widths not a multiple of 4, NaN and ±inf, storage bindings split on wgpu);
//! - [`training`]: Cora with SAGE mean, SAGE LSTM, GCN and GAT at K = 1 and K = 4, per-epoch
//!   losses against the CPU's and K = 4 against K = 1;
//! - [`memory`]: the estimator's peak against the measured peak of every micro-batch;
//! - [`transfers`]: large ragged uploads while kernels are queued, read back bit for bit;
//! - [`oom`]: a run under a budget it does not fit splits and ends with the unsplit loss;
//! - [`speed`]: GB/s (GFLOP/s for GEMM) per op and the launch overhead.
//!
//! A check never panics the caller: a panic, like an error, becomes a failed record with its
//! message. The same functions serve `espalier check` and the test suite.

pub mod cases;
pub mod compare;
mod ctx;
pub mod memory;
pub mod oom;
pub mod ops;
mod ops_graph;
pub mod parity;
pub mod speed;
pub mod training;
pub mod transfers;
pub mod zoo;

use crate::device::Device;
use crate::error::Error;

pub use compare::{Comparison, Tol};
pub use ctx::{
    all_devices, device_info, find_cora, guarded, outcome_of, Ctx, DeviceInfo, Group, Level,
    Options, Outcome, Record, Status,
};

/// Runs the selected groups on `dev`, handing each record to `sink` as it is made (for a
/// table that grows as the checks run, and a JSON file that a crash does not empty), and
/// returns them all. A device that cannot be opened gives one failed record.
pub fn run_device(dev: Device, opts: &Options, sink: &mut dyn FnMut(&Record)) -> Vec<Record> {
    let mut ctx = Ctx::new(dev, opts, sink);
    if dev == Device::Cpu {
        ctx.check("device", || {
            Err(Error::invalid(
                "the CPU is the reference every check compares with: name a GPU device",
            ))
        });
        return ctx.into_records();
    }
    ctx.check("device opens", || {
        dev.memory()?;
        dev.sync()?;
        Ok(Outcome::verdict(true, "the device answers"))
    });
    if !ctx.records().last().is_some_and(Record::failed) {
        for g in Group::ALL {
            if !opts.groups.is_empty() && !opts.groups.contains(&g) {
                continue;
            }
            ctx.set_group(g);
            match g {
                Group::Ops => {
                    ops::run(&mut ctx);
                    ops_graph::run(&mut ctx);
                }
                Group::Training => training::run(&mut ctx),
                Group::Memory => memory::run(&mut ctx),
                Group::Transfers => transfers::run(&mut ctx),
                Group::Oom => oom::run(&mut ctx),
                Group::Speed => speed::run(&mut ctx),
            }
        }
    }
    ctx.into_records()
}
