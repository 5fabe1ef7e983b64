//! `espalier check`: compares each GPU device with the CPU reference, op by op, in
//! training, in memory accounting, in transfers and out of memory, and measures its
//! speed; one table, `--json` with every figure, a non-zero exit on any failure.

use std::time::Instant;

use clap::Args;
use serde::Serialize;

use espalier::check::{self, DeviceInfo, Group, Level, Options, Record, Status};
use espalier::error::{Error, Result};
use espalier::Device;

use crate::common::{check_json_path, write_json};

/// What `espalier check --help` adds below the flags.
pub const HELP: &str = "\
Groups, in the order they run (--only picks some):
  ops        every op forward and backward against the CPU at awkward sizes (empty rows,
             rows longer than a workgroup, widths not a multiple of 4, NaN and ±inf, and on
             wgpu every op with its storage bindings split)
  training   Cora with SAGE mean, SAGE LSTM, GCN and GAT at K = 1 and 4: per-epoch losses
             against the CPU's (relative 1e-4) and K = 4 against K = 1
  memory     the estimator's peak against the measured peak of every micro-batch
  transfers  large ragged uploads behind queued kernels, read back bit for bit
  oom        a budget the batch does not fit: the run splits and ends with the same loss
  speed      GB/s per op (GFLOP/s for GEMM), share of peak bandwidth where the device
             reports it, launch overhead (figures only, no verdict)

--quick is what CI runs (under a minute on a software adapter); --full (the default)
adds sizes, epochs and repetitions. The exit status is 1 when any check fails.";

/// Flags of `espalier check`.
#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// Devices to check (repeat the flag or separate with commas): wgpu, wgpu:N,
    /// wgpu:NAME, cuda, cuda:N. Default: every device `espalier devices` lists but the
    /// CPU, which is the reference.
    #[arg(long, value_delimiter = ',')]
    pub device: Vec<String>,
    /// The smaller set of cases (what CI runs).
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Every case (the default).
    #[arg(long)]
    pub full: bool,
    /// Only these groups (comma-separated): ops, training, memory, transfers, oom, speed.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// A folder holding `cora/` in OGB's raw layout (default: `data/` in the working
    /// directory or beside the executable; without Cora the training checks use a
    /// synthetic Cora-like graph and say so).
    #[arg(long)]
    pub data: Option<std::path::PathBuf>,
    /// Write every figure as JSON to this file (rewritten after each check, so that a
    /// crash keeps what ran), or `-` for standard output (the table then goes to standard
    /// error).
    #[arg(long)]
    pub json: Option<String>,
}

/// What `--json` writes.
#[derive(Serialize)]
struct Report<'a> {
    espalier_version: &'static str,
    level: Level,
    groups: Vec<Group>,
    devices: &'a [DeviceInfo],
    /// Whether every device's checks ran to the end.
    finished: bool,
    passed: usize,
    failed: usize,
    seconds: f64,
    records: &'a [Record],
}

/// The JSON of the records so far.
fn report<'a>(
    level: Level,
    groups: &[Group],
    devices: &'a [DeviceInfo],
    start: Instant,
    records: &'a [Record],
    finished: bool,
) -> Report<'a> {
    let count = |s: Status| records.iter().filter(|r| r.outcome.status == s).count();
    Report {
        espalier_version: env!("CARGO_PKG_VERSION"),
        level,
        groups: groups.to_vec(),
        devices,
        finished,
        passed: count(Status::Pass),
        failed: count(Status::Fail),
        seconds: start.elapsed().as_secs_f64(),
        records,
    }
}

/// What a run of the checks found.
pub struct Checked {
    /// Every record, in the order the checks ran.
    pub records: Vec<Record>,
    /// What `--json` holds (also when no `--json` was given).
    pub json: serde_json::Value,
}

/// Runs `espalier check`: the table on standard output (standard error with `--json -`),
/// `--json`, and an error naming the failed checks when any failed.
pub fn run(a: &CheckArgs) -> Result<()> {
    let to_stdout = a.json.as_deref() == Some("-");
    let checked = run_checks(a, &mut |line: &str| {
        if to_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    })?;
    let failed: Vec<&Record> = checked.records.iter().filter(|r| r.failed()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = failed
        .iter()
        .take(5)
        .map(|r| format!("{} {}", r.device, r.name))
        .collect();
    Err(Error::invalid(format!(
        "{} check(s) failed: {}{}",
        failed.len(),
        names.join("; "),
        if failed.len() > 5 { "; ..." } else { "" }
    )))
}

/// Runs the checks `a` names, handing each line of the table to `say` as its check ends
/// and rewriting `--json` after each; returns every record and the JSON. A failed check is
/// a record, not an error; the errors are bad flags and a `--json` that cannot be written.
pub fn run_checks(a: &CheckArgs, say: &mut dyn FnMut(&str)) -> Result<Checked> {
    let level = if a.quick { Level::Quick } else { Level::Full };
    let groups = a
        .only
        .iter()
        .map(|g| g.parse())
        .collect::<Result<Vec<Group>>>()?;
    if let Some(path) = &a.json {
        check_json_path(path)?;
    }
    let devices = devices(&a.device)?;
    let opts = Options {
        level,
        groups: groups.clone(),
        data: a.data.clone(),
    };
    let to_stdout = a.json.as_deref() == Some("-");
    let infos: Vec<DeviceInfo> = devices.iter().map(|d| check::device_info(*d)).collect();
    let start = Instant::now();
    let mut records: Vec<Record> = Vec::new();
    let write = |records: &[Record], finished: bool| -> Result<()> {
        let Some(path) = &a.json else { return Ok(()) };
        if to_stdout && !finished {
            return Ok(());
        }
        write_json(
            path,
            &report(level, &groups, &infos, start, records, finished),
        )
    };
    for (dev, info) in devices.iter().zip(&infos) {
        say(&format!(
            "check {} ({}), {}{}",
            info.device,
            info.name,
            level.name(),
            if info.software {
                ": a software device; its results show the code is right, its speeds say \
                 nothing of a GPU's"
            } else {
                ""
            }
        ));
        say(&format!(
            "  {:<7}{:<11}{}{}",
            "result",
            "group",
            cell("check"),
            "error or figure"
        ));
        let mut json_error = None;
        let mut sink = |r: &Record| {
            say(&row(r));
            records.push(r.clone());
            if json_error.is_none() {
                json_error = write(&records, false).err();
            }
        };
        check::run_device(*dev, &opts, &mut sink);
        if let Some(e) = json_error {
            return Err(e);
        }
    }
    write(&records, true)?;
    let count = |s: Status| records.iter().filter(|r| r.outcome.status == s).count();
    say(&format!(
        "{} checks in {:.1} s: {} passed, {} failed, {} figures, {} skipped",
        records.len(),
        start.elapsed().as_secs_f64(),
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Info),
        count(Status::Skip)
    ));
    let json = serde_json::to_value(report(level, &groups, &infos, start, &records, true))
        .map_err(|e| Error::invalid(format!("check's JSON: {e}")))?;
    Ok(Checked { records, json })
}

/// One line of the table.
fn row(r: &Record) -> String {
    format!(
        "  {:<7}{:<11}{}{}",
        r.outcome.status.label(),
        r.group.name(),
        cell(&r.name),
        r.outcome.detail
    )
}

/// Width of the table's check column.
const NAME_WIDTH: usize = 50;

/// A check's name padded to the column, or followed by two spaces when longer, so that a
/// long name never runs into its figure.
fn cell(name: &str) -> String {
    if name.chars().count() + 2 <= NAME_WIDTH {
        format!("{name:<NAME_WIDTH$}")
    } else {
        format!("{name}  ")
    }
}

/// The devices named, or every GPU device when none is.
fn devices(names: &[String]) -> Result<Vec<Device>> {
    if names.is_empty() {
        let all: Vec<Device> = check::all_devices()
            .iter()
            .map(|d| d.device.parse())
            .collect::<Result<_>>()?;
        if all.is_empty() {
            return Err(Error::invalid(
                "no GPU device to check: neither a wgpu adapter nor a CUDA device was found \
                 (`espalier devices` says why); the CPU is the reference, not checked against \
                 itself",
            ));
        }
        return Ok(all);
    }
    let mut out: Vec<Device> = Vec::new();
    for n in names {
        let d: Device = n.trim().parse()?;
        if d == Device::Cpu {
            return Err(Error::flag(
                "--device",
                "--device cpu: the CPU is the reference every check compares with; name a \
                 GPU device (wgpu, wgpu:N, cuda, cuda:N)",
            ));
        }
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_check_name_never_runs_into_its_figure() {
        assert_eq!(cell("add").len(), NAME_WIDTH);
        let long = "segment_weighted_sum, 32768 edges of 4 heads of 16 columns";
        assert_eq!(cell(long), format!("{long}  "));
        let edge = "x".repeat(NAME_WIDTH - 1);
        assert!(cell(&edge).ends_with("  "), "{:?}", cell(&edge));
    }
}
