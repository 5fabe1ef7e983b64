//! What a user trusts on the command line: sizes too large for memory are errors naming
//! the flag (never an abort), model flags the chosen model would ignore are errors, the
//! model line shows only what applies, `--fanouts -1,-1` parses, `partition --compare`
//! splits batches by default, help texts name the PyG reference script, and a software
//! wgpu adapter is announced.

// The helpers the library's tests share (tests/common/ at the repository root).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

fn espalier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .output()
        .expect("the espalier binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit code 1 with an error on standard error that contains every one of `needles`:
/// not a panic (101), not a signal (an abort has no exit code).
fn fails_with(args: &[&str], needles: &[&str]) {
    let out = espalier(args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {:?}\n{err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in\n{err}");
    }
}

fn succeeds(args: &[&str]) -> String {
    let out = espalier(args);
    let err = stderr(&out);
    assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
    err
}

const SMALL: &[&str] = &["--epochs", "1", "--hidden", "8"];

fn train(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["train".to_string()];
    v.extend(SMALL.iter().map(|s| s.to_string()));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn sizes_past_memory_are_errors_naming_the_flag_not_aborts() {
    for (flags, flag) in [
        (&["--hidden", "1000000000"][..], "--hidden 1000000000"),
        (
            &["--model", "gat", "--heads", "1000000"][..],
            "--heads 1000000",
        ),
        (&["--classes", "4000000000"][..], "--classes 4000000000"),
    ] {
        let mut v = vec!["train", "--epochs", "1"];
        v.extend(flags);
        fails_with(&v, &[flag, "too large"]);
        let mut v = vec!["partition", "--no-run"];
        v.extend(flags);
        fails_with(&v, &[flag, "too large"]);
    }
}

#[test]
fn flags_the_model_does_not_read_are_errors_naming_flag_and_model() {
    for (flags, needles) in [
        (
            &["--model", "gcn", "--aggr", "lstm"][..],
            &["--aggr", "gcn"][..],
        ),
        (
            &["--model", "gat", "--aggr", "pool"][..],
            &["--aggr", "gat"][..],
        ),
        (&["--heads", "2"][..], &["--heads", "sage"][..]),
        (
            &["--model", "gcn", "--heads", "2"][..],
            &["--heads", "gcn"][..],
        ),
        (
            &["--model", "gcn", "--attn-dropout", "0.1"][..],
            &["--attn-dropout", "gcn"][..],
        ),
        (
            &["--self-loops", "false"][..],
            &["--self-loops", "sage"][..],
        ),
        (&["--lstm-split", "4"][..], &["--lstm-split", "lstm"][..]),
        (
            &["--model", "gat", "--lstm-split", "4"][..],
            &["--lstm-split", "gat"][..],
        ),
    ] {
        fails_with(&args(&train(flags)), needles);
    }
}

#[test]
fn model_line_shows_only_what_applies() {
    for (flags, line, absent) in [
        (&["--model", "gcn"][..], "model gcn:", "Mean"),
        (&["--aggr", "sum"][..], "model sage-sum:", "Gcn"),
        (
            &["--model", "gat", "--heads", "2"][..],
            "model gat (2 heads):",
            "Mean",
        ),
    ] {
        let err = succeeds(&args(&train(flags)));
        assert!(err.contains(line), "{flags:?}: `{line}` not in\n{err}");
        assert!(!err.contains(absent), "{flags:?}: `{absent}` in\n{err}");
    }
}

#[test]
fn fanouts_of_minus_one_parse_after_a_space() {
    let err = succeeds(&args(&train(&["--fanouts", "-1,-1"])));
    assert!(err.contains("fanouts [-1, -1]"), "{err}");
    let err = succeeds(&args(&train(&["--fanouts", "-1,5"])));
    assert!(err.contains("fanouts [-1, 5]"), "{err}");
    for bad in ["0,5", "-2,3", "-1,-5"] {
        fails_with(
            &args(&train(&["--fanouts", bad])),
            &["--fanouts", "-1 for all"],
        );
    }
}

#[test]
fn partition_compare_splits_into_eight_micro_batches_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("compare.json");
    let json = json.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut v = vec!["partition", "--compare", "--no-run", "--hidden", "8"];
        v.extend(extra);
        v.extend(["--json", json]);
        let err = succeeds(&v);
        let text = std::fs::read_to_string(json).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ks: Vec<u64> = v["micro_batches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["k"].as_u64().unwrap())
            .collect();
        (err, ks)
    };
    let (err, ks) = run(&[]);
    assert!(ks.iter().all(|&k| k == 8), "{ks:?}");
    assert!(err.contains("K = 8"), "the default is announced: {err}");
    let (_, ks) = run(&["--micro-batches", "3"]);
    assert!(ks.iter().all(|&k| k == 3), "{ks:?}");
}

#[test]
fn help_and_workloads_name_the_pyg_reference_script_not_a_peer() {
    for a in [
        &["train", "--help"][..],
        &["partition", "--help"][..],
        &["bench", "--help"][..],
        &["bench", "--list"][..],
    ] {
        let out = espalier(a);
        assert!(out.status.success(), "{a:?}");
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        for vague in ["the peer", "peer's", "pyg peer"] {
            assert!(!text.contains(vague), "{a:?} speaks of `{vague}`:\n{text}");
        }
    }
    let list = String::from_utf8_lossy(&espalier(&["bench", "--list"]).stdout).into_owned();
    assert!(
        list.contains("PyTorch Geometric reference script"),
        "{list}"
    );
    let help = String::from_utf8_lossy(&espalier(&["partition", "--help"]).stdout).into_owned();
    assert!(help.contains("K = 8"), "{help}");
}

#[test]
fn every_flag_of_the_model_registry_is_a_cli_flag_with_the_registry_help() {
    let out = espalier(&["train", "--help"]);
    assert!(out.status.success());
    // clap wraps long help; compare without line breaks and indentation.
    let help: String = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (flag, text) in espalier::nn::model_flags() {
        assert!(help.contains(flag), "{flag} is not in train --help");
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains(&text),
            "{flag}'s help `{text}` is not in\n{help}"
        );
    }
    for m in espalier::nn::MODELS {
        assert!(help.contains(m.help), "{}", m.help);
    }
}

#[test]
fn a_model_flag_value_that_does_not_parse_is_an_error_naming_the_flag() {
    for (extra, needles) in [
        (
            &["--model", "gat", "--heads", "two"][..],
            &["--heads two"][..],
        ),
        (
            &["--model", "gat", "--self-loops", "yes"][..],
            &["--self-loops yes"][..],
        ),
        (&["--aggr", "median"][..], &["--aggr median", "lstm"][..]),
    ] {
        fails_with(&args(&train(extra)), needles);
    }
}

#[test]
fn a_software_wgpu_adapter_is_announced_once() {
    let adapters = espalier::device::wgpu::adapters();
    let Some(first) = adapters.first() else {
        common::skip_backend("wgpu", "no adapter");
        return;
    };
    let out = espalier(&args(&train(&["--device", "wgpu", "--eval-every", "0"])));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let warnings = err.matches("is a software adapter").count();
    if first.device_type == "Cpu" {
        assert_eq!(warnings, 1, "{err}");
        assert!(err.contains("emulates a GPU on the CPU"), "{err}");
    } else {
        assert_eq!(warnings, 0, "{} is hardware: {err}", first.name);
    }
}

#[test]
fn another_model_drops_a_workloads_model_only_flags() {
    // betty-products-lstm sets --aggr lstm; with --model gat that flag goes, so the error
    // is about the explicit --heads 0 (checked before any data is loaded), not --aggr.
    fails_with(
        &[
            "bench",
            "--workload",
            "betty-products-lstm",
            "--model",
            "gat",
            "--heads",
            "0",
        ],
        &["--heads must be at least 1"],
    );
    // An explicit --aggr with another model is still the user's error.
    fails_with(
        &[
            "bench",
            "--workload",
            "cora-sage-mean",
            "--model",
            "gcn",
            "--aggr",
            "sum",
        ],
        &["--aggr does not apply to --model gcn"],
    );
}

#[test]
fn features_flag_takes_auto_host_or_device_and_names_them_when_wrong() {
    fails_with(
        &[
            "train",
            "--dataset",
            "synthetic:cora-like,scale=0.1",
            "--features",
            "gpu",
        ],
        &["--features", "auto, host or device"],
    );
    // On the CPU the matrix already lives where it is used: device is accepted as a no-op.
    let err = succeeds(&[
        "train",
        "--dataset",
        "synthetic:cora-like,scale=0.1",
        "--epochs",
        "1",
        "--hidden",
        "8",
        "--features",
        "device",
    ]);
    assert!(!err.contains("features on it"), "{err}");
}

/// Numbers out of range are errors naming the flag, before the dataset is loaded (the
/// dataset given here does not exist), and a negative number after a space is read as
/// the flag's value, not as another flag.
#[test]
fn bad_training_numbers_are_refused_before_loading_naming_the_flag() {
    for (flag, value, needle) in [
        ("--lr", "-1", "--lr -1: the learning rate must be positive"),
        ("--lr", "0", "--lr 0: the learning rate must be positive"),
        ("--epochs", "0", "--epochs must be at least 1"),
        ("--weight-decay", "-0.5", "--weight-decay -0.5"),
        ("--lr-gamma", "-2", "--lr-gamma -2"),
        (
            "--eval-batch-size",
            "0",
            "--eval-batch-size must be at least 1",
        ),
        ("--dropout", "-0.1", "--dropout -0.1 must be in [0, 1)"),
    ] {
        let args = [
            "train",
            "--dataset",
            "no-such-dataset-anywhere",
            flag,
            value,
        ];
        fails_with(&args, &[needle]);
        let err = stderr(&espalier(&args));
        assert!(!err.contains("no-such-dataset"), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

/// Every error reads `error: MESSAGE`, once: no `Error:` (Rust's own prefix, which the
/// examples printed with the error's debug form), no prefix repeated inside a message
/// that quotes another error (`invalid argument: ... invalid argument: ...`).
#[test]
fn errors_have_one_prefix_everywhere() {
    for args in [
        &["train", "--memory-budget", "xyz"][..],
        &["train", "--lr", "0"],
        &["bench", "--workload", "cora-sage-mean", "--bogus"],
        &["train", "--dataset", "no-such-dataset-anywhere"],
    ] {
        let err = stderr(&espalier(args));
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert_eq!(err.matches("error:").count(), 1, "{args:?}: {err}");
        assert!(!err.contains("invalid argument"), "{args:?}: {err}");
    }
    // The examples, built beside the test binaries by `cargo test`.
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("train_cora"));
    match example.filter(|p| p.is_file()) {
        Some(exe) => {
            let out = Command::new(exe).arg("no-such-folder").output().unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.starts_with("error: "), "{err}");
            assert!(
                err.contains("no-such-folder") && !err.contains("Error"),
                "{err}"
            );
        }
        None => println!("skipped the example: not built beside this test"),
    }
}
