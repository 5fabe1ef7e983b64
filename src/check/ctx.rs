//! The records of `espalier check` and the context its checks run in: levels, groups,
//! verdicts, the device facts a check needs, and the guard that turns a panic or an error
//! into a failed record.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::device::Device;
use crate::error::{Error, Result};

/// How much to check: `Quick` (what CI runs, under a minute on a software adapter) or
/// `Full` (more sizes, epochs and repetitions; the user's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The smaller set.
    Quick,
    /// Every case.
    Full,
}

impl Level {
    /// `quick` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Quick => "quick",
            Level::Full => "full",
        }
    }
}

/// A group of checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// Op parity.
    Ops,
    /// Training parity.
    Training,
    /// Estimated against measured peak memory.
    Memory,
    /// Uploads and readbacks under load.
    Transfers,
    /// Out-of-memory splits.
    Oom,
    /// Microbenchmarks.
    Speed,
}

impl Group {
    /// Every group, in the order they run.
    pub const ALL: [Group; 6] = [
        Group::Ops,
        Group::Training,
        Group::Memory,
        Group::Transfers,
        Group::Oom,
        Group::Speed,
    ];

    /// The group's name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Group::Ops => "ops",
            Group::Training => "training",
            Group::Memory => "memory",
            Group::Transfers => "transfers",
            Group::Oom => "oom",
            Group::Speed => "speed",
        }
    }
}

impl std::str::FromStr for Group {
    type Err = Error;
    fn from_str(s: &str) -> Result<Group> {
        Group::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Group::ALL.iter().map(|g| g.name()).collect();
                Error::invalid(format!(
                    "unknown check group `{s}`: expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// A check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within tolerance.
    Pass,
    /// Outside tolerance, an error or a panic.
    Fail,
    /// A measurement without a verdict (a speed).
    Info,
    /// Not applicable to this device, with the reason in the detail.
    Skip,
}

impl Status {
    /// `pass`, `FAIL`, `info` or `skip`, as the table prints it.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Info => "info",
            Status::Skip => "skip",
        }
    }
}

/// What a check found: its verdict, its figures and one line for a person.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The verdict.
    pub status: Status,
    /// Every figure the verdict rests on, by name.
    pub figures: BTreeMap<String, f64>,
    /// One line: the figures that matter, or why it failed.
    pub detail: String,
}

impl Outcome {
    /// Pass when `ok`, else fail, with `detail` and no figures yet.
    pub fn verdict(ok: bool, detail: impl Into<String>) -> Outcome {
        Outcome {
            status: if ok { Status::Pass } else { Status::Fail },
            figures: BTreeMap::new(),
            detail: detail.into(),
        }
    }

    /// A measurement.
    pub fn info(detail: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Info,
            figures: BTreeMap::new(),
            detail: detail.into(),
        }
    }

    /// Not applicable here, and why.
    pub fn skip(why: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Skip,
            figures: BTreeMap::new(),
            detail: why.into(),
        }
    }

    /// Adds a figure.
    pub fn figure(mut self, name: &str, value: f64) -> Outcome {
        self.figures.insert(name.to_string(), value);
        self
    }
}

/// One check's result on one device.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// The device checked, e.g. `wgpu:0`.
    pub device: String,
    /// Its group.
    pub group: Group,
    /// What was checked, e.g. `segment_max/star/f=5`.
    pub name: String,
    /// The verdict, figures and detail.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Wall-clock seconds the check took.
    pub seconds: f64,
}

impl Record {
    /// Whether the check failed.
    pub fn failed(&self) -> bool {
        self.outcome.status == Status::Fail
    }
}

/// What to check on a device.
#[derive(Clone, Debug)]
pub struct Options {
    /// Quick or full.
    pub level: Level,
    /// The groups to run (all when empty).
    pub groups: Vec<Group>,
    /// A folder holding `cora/` in OGB's raw layout; `None`: looked up beside the working
    /// directory and the executable ([`find_cora`]).
    pub data: Option<PathBuf>,
}

/// Where a device stands: what a check of it needs to know beyond its name.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    /// `wgpu:0`, `cuda:0`.
    pub device: String,
    /// The adapter's or GPU's name.
    pub name: String,
    /// A software adapter (lavapipe, llvmpipe) or the emulated CUDA device: its results
    /// say the code is right, its speeds say nothing of a GPU's.
    pub software: bool,
    /// Peak memory bandwidth in bytes per second, where the device reports it.
    pub peak_bandwidth: Option<f64>,
}

/// Every GPU device this build sees: each wgpu adapter, then each CUDA device (the devices
/// `espalier devices` lists, less the CPU, which is the reference). A backend that is
/// absent adds nothing.
pub fn all_devices() -> Vec<DeviceInfo> {
    let mut out: Vec<DeviceInfo> = crate::device::wgpu::adapters()
        .into_iter()
        .map(|a| DeviceInfo {
            device: format!("wgpu:{}", a.index),
            software: a.device_type == "Cpu",
            name: a.name,
            peak_bandwidth: None,
        })
        .collect();
    if let Ok(list) = crate::device::cuda::devices() {
        out.extend(list.into_iter().map(|d| DeviceInfo {
            device: format!("cuda:{}", d.index),
            name: d.name,
            software: d.emulated,
            peak_bandwidth: Some(d.peak_bandwidth).filter(|b| *b > 0.0),
        }));
    }
    out
}

/// What is known of `dev` (see [`DeviceInfo`]); a device absent from [`all_devices`] gets
/// its own name and no facts, and its first check says why it cannot be used.
pub fn device_info(dev: Device) -> DeviceInfo {
    let name = dev.to_string();
    all_devices()
        .into_iter()
        .find(|d| d.device == name)
        .unwrap_or(DeviceInfo {
            device: name.clone(),
            name,
            software: false,
            peak_bandwidth: None,
        })
}

/// The running state of one device's checks: where records go.
pub struct Ctx<'a> {
    /// The device checked.
    pub dev: Device,
    /// What is known of it.
    pub info: DeviceInfo,
    /// What to check.
    pub opts: &'a Options,
    group: Group,
    records: Vec<Record>,
    sink: &'a mut dyn FnMut(&Record),
}

impl<'a> Ctx<'a> {
    /// A context for `dev`'s checks, handing each record to `sink`.
    pub(super) fn new(dev: Device, opts: &'a Options, sink: &'a mut dyn FnMut(&Record)) -> Ctx<'a> {
        Ctx {
            dev,
            info: device_info(dev),
            opts,
            group: Group::Ops,
            records: Vec::new(),
            sink,
        }
    }

    /// Sets the group the next records belong to.
    pub(super) fn set_group(&mut self, g: Group) {
        self.group = g;
    }

    /// The records made so far.
    pub(super) fn records(&self) -> &[Record] {
        &self.records
    }

    /// The records, ending the context.
    pub(super) fn into_records(self) -> Vec<Record> {
        self.records
    }

    /// The level.
    pub fn level(&self) -> Level {
        self.opts.level
    }

    /// Whether this is a full check.
    pub fn full(&self) -> bool {
        self.opts.level == Level::Full
    }

    /// Runs one check: its outcome, or a failure with the error or panic it ended in.
    pub fn check(&mut self, name: impl Into<String>, f: impl FnOnce() -> Result<Outcome>) {
        let name = name.into();
        let start = Instant::now();
        let outcome = outcome_of(f);
        let record = Record {
            device: self.dev.to_string(),
            group: self.group,
            name,
            outcome,
            seconds: start.elapsed().as_secs_f64(),
        };
        (self.sink)(&record);
        self.records.push(record);
    }
}

/// `cora/` under `opts.data`, else the first of `./data/cora` and `data/cora` beside the
/// executable or up to two folders above it (a bundle's layout, and `target/release/` in a
/// checkout); `None` when none holds Cora.
pub fn find_cora(data: Option<&std::path::Path>) -> Option<PathBuf> {
    let has = |d: &std::path::Path| d.join("raw").is_dir();
    if let Some(d) = data {
        return [d.join("cora"), d.to_path_buf()]
            .into_iter()
            .find(|p| has(p));
    }
    let mut candidates = vec![PathBuf::from("data/cora")];
    if let Some(exe) = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
    {
        let mut dir = exe.parent().map(|p| p.to_path_buf());
        for _ in 0..3 {
            let Some(d) = dir else { break };
            candidates.push(d.join("data/cora"));
            dir = d.parent().map(|p| p.to_path_buf());
        }
    }
    candidates.into_iter().find(|p| has(p))
}

/// The outcome of a check: `f`'s, or a failure saying the error or the panic (with its
/// message and place) it ended in.
pub fn outcome_of(f: impl FnOnce() -> Result<Outcome>) -> Outcome {
    let _quiet = QuietPanics::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => Outcome::verdict(false, format!("error: {e}")),
        Err(payload) => Outcome::verdict(false, format!("panic: {}", panic_text(&payload))),
    }
}

/// Runs `f`, turning a panic into an error with its message: for work a check needs
/// before its verdict (a training run several records compare).
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _quiet = QuietPanics::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::invalid(format!("panic: {}", panic_text(&payload)))),
    }
}

/// The message of a panic payload.
fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string());
    match LAST_PANIC.with(|l| l.borrow_mut().take()) {
        Some(at) => format!("{msg} (at {at})"),
        None => msg,
    }
}

thread_local! {
    /// Where the last panic inside a check on this thread happened, and how many checks
    /// this thread is inside.
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    static IN_CHECK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// While alive, a panic on this thread records its place for the failed record instead of
/// printing a message into the table; panics elsewhere go to the hook that was there.
struct QuietPanics;

impl QuietPanics {
    fn install() -> QuietPanics {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if IN_CHECK.with(|c| c.get()) == 0 {
                    return previous(info);
                }
                if let Some(loc) = info.location() {
                    let at = format!("{}:{}", loc.file(), loc.line());
                    LAST_PANIC.with(|l| *l.borrow_mut() = Some(at));
                }
            }));
        });
        IN_CHECK.with(|c| c.set(c.get() + 1));
        QuietPanics
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        IN_CHECK.with(|c| c.set(c.get() - 1));
    }
}
