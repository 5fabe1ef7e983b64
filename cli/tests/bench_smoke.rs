//! `espalier bench` finishes on a tiny synthetic graph and its JSON holds the medians.
//! Timings are never asserted: only that they are there and finite.

use std::process::Command;

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .arg("bench")
        .args(args)
        .args([
            "--epochs", "1", "--warmup", "0", "--hidden", "16", "--json", "-",
        ])
        .output()
        .expect("run espalier");
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench --json - writes one JSON object")
}

fn check_run(run: &serde_json::Value) {
    for key in ["epoch_median_s", "seeds_per_s", "redundancy"] {
        assert!(
            run[key].as_f64().is_some_and(f64::is_finite),
            "{key}: {run}"
        );
    }
    for key in [
        "sample",
        "partition",
        "slice",
        "gather",
        "wait",
        "forward",
        "backward",
        "optimizer",
    ] {
        let v = run["phase_median_s"][key].as_f64();
        assert!(v.is_some_and(|v| v.is_finite() && v >= 0.0), "{key}: {run}");
    }
    assert!(run["peak_bytes"].as_u64().is_some_and(|b| b > 0));
    assert!(run["k"].as_u64().is_some_and(|k| k >= 1));
    // A SAGE layer multiplies matrices and moves bytes in both directions; on the CPU each
    // rate has its share of the limits measured in the same run.
    for phase in ["forward", "backward", "forward_backward"] {
        let w = &run["work"][phase];
        for key in ["madds", "bytes", "gflops", "gbps"] {
            assert!(
                w[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0),
                "work.{phase}.{key}: {run}"
            );
        }
        for key in ["gemm_peak_share", "stream_peak_share"] {
            assert!(
                w[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0),
                "work.{phase}.{key}: {run}"
            );
        }
    }
    let (f, b, fb) = (
        &run["work"]["forward"],
        &run["work"]["backward"],
        &run["work"]["forward_backward"],
    );
    let madds = |w: &serde_json::Value| w["madds"].as_f64().unwrap();
    // One epoch: the medians are that epoch's figures, and the two phases add up.
    assert_eq!(madds(f) + madds(b), madds(fb));
}

fn check_peak(report: &serde_json::Value) {
    for key in ["gemm_gflops", "stream_gbps"] {
        assert!(
            report["peak"][key]
                .as_f64()
                .is_some_and(|v| v.is_finite() && v > 0.0),
            "peak.{key}: {report}"
        );
    }
}

#[test]
fn explicit_flags() {
    let report = bench(&["--dataset", "synthetic:cora-like,scale=0.2"]);
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    check_run(&runs[0]);
    check_peak(&report);
}

#[test]
fn workload_sweeps_k_and_scales() {
    let report = bench(&["--workload", "cora-sage-mean", "--scale", "0.2"]);
    let runs = report["runs"].as_array().expect("runs");
    let ks: Vec<u64> = runs.iter().map(|r| r["k"].as_u64().unwrap()).collect();
    assert_eq!(ks, [1, 4]);
    for r in runs {
        check_run(r);
        assert_eq!(r["dataset"], "cora-like,scale=0.2");
        assert_eq!(r["config"]["fanouts"], serde_json::json!([25, 10]));
    }
}

#[test]
fn explicit_k_overrides_the_sweep() {
    let report = bench(&[
        "--workload",
        "cora-sage-mean",
        "--scale",
        "0.2",
        "--micro-batches",
        "2",
    ]);
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["k"], 2);
}

#[test]
fn unknown_workload_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["bench", "--workload", "no-such-workload"])
        .output()
        .expect("run espalier");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cora-sage-mean"));
}
