//! `espalier check`: a broken check is a failed record with its reason, never a crash; the
//! command refuses what it cannot check and exits non-zero on any failure; `--json` holds
//! every record. On each GPU device present (lavapipe and the emulated CUDA device in CI),
//! the quick op and transfer groups pass through the library, and one group through the
//! binary writes its JSON. CI runs the whole `check --quick` on both devices from the
//! release build (`.ci/run`).

// The helpers the library's tests share (tests/common/ at the repository root).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::sync::Mutex;

use espalier::check::{self, Comparison, Group, Level, Options, Outcome, Status, Tol};
use espalier::{Device, Error};

/// The checks of this binary share the devices' memory trackers: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn espalier(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_panicking_or_failing_check_is_a_failed_record_with_its_reason() {
    let o = check::outcome_of(|| panic!("kernel exploded"));
    assert_eq!(o.status, Status::Fail);
    assert!(
        o.detail.contains("panic: kernel exploded") && o.detail.contains("tests/check.rs"),
        "{}",
        o.detail
    );
    let o = check::outcome_of(|| Err(Error::invalid("no adapter")));
    assert_eq!(o.status, Status::Fail);
    assert!(o.detail.contains("error: no adapter"), "{}", o.detail);
    let o = check::outcome_of(|| Ok(Outcome::info("3.1 GB/s").figure("gb_per_s", 3.1)));
    assert_eq!((o.status, o.figures["gb_per_s"]), (Status::Info, 3.1));
    // A panic outside a check still reaches the usual hook (the test harness's).
    let r = std::panic::catch_unwind(|| panic!("outside"));
    assert!(r.is_err());
}

#[test]
fn a_wrong_value_fails_with_the_first_index_and_the_error_figures() {
    let cpu = [1.0f32, 2.0, 3.0, f32::NAN];
    let c = Comparison::of(&cpu, &[1.0, 2.0, 3.0, f32::NAN], Tol::F32);
    assert!(c.ok());
    let c = Comparison::of(&cpu, &[1.0, 2.5, 3.0, 0.0], Tol::F32);
    assert!(!c.ok() && c.bad == 2);
    let d = c.describe();
    assert!(d.contains("first at 1: cpu 2 vs device 2.5"), "{d}");
}

#[test]
fn the_cpu_is_not_checked_against_itself() {
    let (ok, _, err) = espalier(&["check", "--device", "cpu"]);
    assert!(!ok && err.contains("the CPU is the reference"), "{err}");
    let r = check::run_device(
        Device::Cpu,
        &Options {
            level: Level::Quick,
            groups: vec![],
            data: None,
        },
        &mut |_| {},
    );
    assert!(r.len() == 1 && r[0].failed(), "{r:?}");
}

#[test]
fn bad_flags_are_errors_that_name_them() {
    let (ok, _, err) = espalier(&["check", "--only", "kernels"]);
    assert!(
        !ok && err.contains("unknown check group `kernels`"),
        "{err}"
    );
    assert!(
        err.contains("ops, training, memory, transfers, oom, speed"),
        "{err}"
    );
    let (ok, _, err) = espalier(&["check", "--quick", "--full"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    let (ok, _, err) = espalier(&["check", "--device", "tpu"]);
    assert!(!ok && err.contains("unknown device `tpu`"), "{err}");
}

#[test]
fn a_device_that_cannot_open_fails_and_exits_non_zero() {
    if espalier::device::cuda::devices().is_ok() {
        println!("skipping: a CUDA device is present, so `--device cuda` opens");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("check.json");
    let (ok, out, err) = espalier(&[
        "check",
        "--quick",
        "--device",
        "cuda",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL") && out.contains("device opens"),
        "{out}"
    );
    assert!(err.contains("1 check(s) failed"), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["failed"], 1);
    assert_eq!(j["finished"], true);
    assert_eq!(j["records"][0]["status"], "fail");
}

#[test]
fn quick_op_and_transfer_checks_pass_on_every_gpu() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let opts = Options {
        level: Level::Quick,
        groups: vec![Group::Ops, Group::Transfers],
        data: None,
    };
    for dev in common::gpu_devices() {
        let records = check::run_device(dev, &opts, &mut |r| {
            println!(
                "{} {} {}: {}",
                r.device,
                r.outcome.status.label(),
                r.name,
                r.outcome.detail
            )
        });
        let failed: Vec<String> = records
            .iter()
            .filter(|r| r.failed())
            .map(|r| format!("{}: {}", r.name, r.outcome.detail))
            .collect();
        assert!(failed.is_empty(), "{dev}: {failed:#?}");
        assert!(records.len() > 40, "{dev}: only {} records", records.len());
    }
}

#[test]
fn json_holds_every_record_and_its_figures() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for dev in common::gpu_devices() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("check.json");
        let name = dev.to_string();
        let (ok, out, err) = espalier(&[
            "check",
            "--quick",
            "--device",
            &name,
            "--only",
            "transfers,speed",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(ok, "{out}{err}");
        let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let records = j["records"].as_array().unwrap();
        assert_eq!(j["finished"], true);
        assert_eq!(j["failed"], 0);
        assert!(records.iter().all(|r| r["device"] == name.as_str()));
        assert!(records
            .iter()
            .any(|r| r["group"] == "transfers" && r["status"] == "pass"));
        let speeds: Vec<&serde_json::Value> =
            records.iter().filter(|r| r["group"] == "speed").collect();
        // Every benchmarked op (12) and the launch overhead.
        assert!(speeds.len() >= 13, "{speeds:?}");
        let printed = speeds.len();
        for r in speeds {
            assert_eq!(r["status"], "info", "{r}");
            let f = &r["figures"];
            let time = f["seconds_per_call"].as_f64().or(f["us_per_op"].as_f64());
            assert!(time.is_some_and(|t| t > 0.0), "{r}");
        }
        // The table printed every record.
        assert_eq!(
            out.lines().filter(|l| l.starts_with("  info ")).count(),
            printed,
            "{out}"
        );
    }
}
