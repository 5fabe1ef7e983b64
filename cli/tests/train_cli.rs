//! `espalier train` as a user runs it: what it writes (JSON, checkpoints), when it stops
//! (divergence, Ctrl-C, early stopping, a finished run), what it says and where.
//! Every run is a tiny synthetic graph with a small model: a few seconds each.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const DATA: &str = "synthetic:cora-like,scale=0.2";

fn espalier() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_espalier"));
    c.env_remove("ESPALIER_LOG");
    c
}

/// `espalier train` on the tiny graph with `args` (3 epochs unless `args` say).
fn train(args: &[&str]) -> Output {
    let mut c = espalier();
    c.args(["train", "--dataset", DATA, "--hidden", "16"]);
    if !args.contains(&"--epochs") {
        c.args(["--epochs", "3"]);
    }
    c.args(args).output().expect("run espalier")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "failed: {}", stderr(o));
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// (epoch, every model tensor finite) of a checkpoint.
fn checkpoint_state(path: &Path) -> (usize, bool) {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let epoch = meta.metadata().as_ref().unwrap()["epoch"].parse().unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let finite = st
        .tensors()
        .iter()
        .filter(|(n, _)| n.starts_with("model."))
        .all(|(_, v)| {
            v.data()
                .chunks_exact(4)
                .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
        });
    (epoch, finite)
}

/// Files in `dir` (no temporary file may be left behind).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn diverging_run_stops_with_an_error_and_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("model.safetensors");
    let out = train(&["--lr", "1e30", "--checkpoint", p(&ckpt)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("diverged"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (epoch, finite) = checkpoint_state(&ckpt);
    assert!(finite, "the checkpoint holds non-finite weights");
    assert!(
        epoch < 3,
        "the diverged epochs were checkpointed: epoch {epoch}"
    );
    assert_eq!(names(dir.path()), vec!["model.safetensors".to_string()]);
}

#[test]
fn on_nan_skip_batch_counts_skipped_batches_and_stops_when_a_whole_epoch_is_skipped() {
    // 54 training nodes in batches of 16: the first batch's step blows the weights up, the
    // next batches' losses are NaN and skipped; in epoch 2 every batch is.
    let out = train(&[
        "--lr",
        "1e30",
        "--batch-size",
        "16",
        "--on-nan",
        "skip-batch",
    ]);
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with("epoch    1/3") && l.contains("skipped 3")),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("every batch of epoch 2"), "{err}");
    let bad = train(&["--on-nan", "ignore"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("skip-batch"), "{}", stderr(&bad));
}

#[test]
fn json_path_that_cannot_be_written_fails_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    for bad in [file.join("out.json"), dir.path().to_path_buf()] {
        let out = train(&["--json", p(&bad)]);
        assert_eq!(out.status.code(), Some(1), "{}", p(&bad));
        let err = stderr(&out);
        assert!(err.contains("--json"), "{err}");
        assert!(!err.contains("epoch "), "trained before failing: {err}");
    }
}

#[test]
fn json_creates_its_folder_counts_epochs_from_one_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("runs/a/summary.json");
    ok(&train(&["--json", p(&json)]));
    let v = read_json(&json);
    let epochs: Vec<u64> = v["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, vec![1, 2, 3]);
    assert_eq!(v["interrupted"], false);
    assert_eq!(
        names(json.parent().unwrap()),
        vec!["summary.json".to_string()]
    );
}

#[test]
fn json_to_stdout_is_the_only_thing_on_stdout() {
    let out = train(&["--json", "-"]);
    ok(&out);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is exactly one JSON object");
    assert!(v["test_acc"].is_number());
    assert!(stderr(&out).contains("test accuracy"), "{}", stderr(&out));
}

#[test]
fn profile_is_off_by_default_recorded_in_the_json_and_does_not_change_the_losses() {
    let losses = |v: &serde_json::Value| -> Vec<f64> {
        v["epochs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["loss"].as_f64().unwrap())
            .collect()
    };
    let plain = train(&["--json", "-"]);
    ok(&plain);
    let plain: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(plain["config"]["profile"], false);
    let profiled = train(&["--json", "-", "--profile"]);
    ok(&profiled);
    let profiled: serde_json::Value = serde_json::from_slice(&profiled.stdout).unwrap();
    assert_eq!(profiled["config"]["profile"], true);
    assert_eq!(losses(&plain), losses(&profiled));
}

/// Runs `espalier train RUN --epochs 100000`, sends `signals` (30 ms apart) once epoch 2
/// is done, and returns what it printed after, its exit code and its JSON.
fn interrupted(run: &[&str], signals: &[&str]) -> (Vec<String>, Option<i32>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("partial.json");
    let mut child = espalier()
        .arg("train")
        .args(run)
        .args(["--epochs", "100000", "--verbose", "--json", p(&json)])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Wait for the second epoch, so that some epochs are done.
    for line in lines.by_ref() {
        if line.unwrap().starts_with("epoch    2/") {
            break;
        }
    }
    for signal in signals {
        let killed = Command::new("kill")
            .args([*signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let status = child.wait().unwrap();
    (rest, status.code(), read_json(&json))
}

/// Sends `signal` during epoch 2 and checks the partial JSON and the exit code.
fn stops_on(signal: &str) {
    let (rest, code, v) = interrupted(&["--dataset", DATA, "--hidden", "16"], &[signal]);
    assert_eq!(code, Some(130), "{rest:?}");
    assert_eq!(v["interrupted"], true);
    let n = v["epochs"].as_array().unwrap().len();
    assert!((2..100000).contains(&n), "{n} epochs");
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
}

#[test]
fn sigint_stops_the_run_writes_a_partial_json_and_exits_130() {
    stops_on("-INT");
}

#[test]
fn sigterm_stops_the_run_like_sigint() {
    stops_on("-TERM");
}

#[test]
fn resume_extends_the_run_and_the_json_holds_every_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck.safetensors");
    let json = dir.path().join("s.json");
    ok(&train(&["--epochs", "2", "--checkpoint", p(&ckpt)]));
    ok(&train(&[
        "--epochs",
        "4",
        "--resume",
        p(&ckpt),
        "--checkpoint",
        p(&ckpt),
        "--json",
        p(&json),
    ]));
    let v = read_json(&json);
    let epochs: Vec<u64> = v["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, vec![1, 2, 3, 4]);
}

#[test]
fn resume_refuses_another_configuration_or_dataset_naming_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck.safetensors");
    ok(&train(&["--epochs", "1", "--checkpoint", p(&ckpt)]));
    let out = train(&["--resume", p(&ckpt), "--lr", "0.02", "--optimizer", "sgd"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("lr (0.01 in the checkpoint, 0.02 now)"),
        "{err}"
    );
    assert!(err.contains("optimizer"), "{err}");
    let out = espalier()
        .args(["train", "--dataset", "synthetic:cora-like,scale=0.3"])
        .args(["--hidden", "16", "--epochs", "3", "--resume", p(&ckpt)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("another dataset"), "{}", stderr(&out));
}

#[test]
fn resuming_a_finished_run_says_so_and_reports_the_stored_figures() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck.safetensors");
    let first = train(&["--epochs", "2", "--checkpoint", p(&ckpt)]);
    ok(&first);
    let json = dir.path().join("again.json");
    let again = train(&["--epochs", "2", "--resume", p(&ckpt), "--json", p(&json)]);
    ok(&again);
    let said = stdout(&again);
    assert!(said.contains("already finished"), "{said}");
    assert!(!said.contains("NaN"), "{said}");
    // The same final line as the run that finished.
    let figures = |s: &str| s.split("peak").next().unwrap().trim().to_string();
    let first_line = stdout(&first);
    assert!(
        said.contains(&figures(&first_line)),
        "{said} vs {first_line}"
    );
    let v = read_json(&json);
    assert_eq!(v["already_finished"], true);
    assert_eq!(v["epochs"].as_array().unwrap().len(), 2);
}

#[test]
fn checkpoint_path_that_is_a_folder_fails_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let out = train(&["--checkpoint", p(dir.path())]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("--checkpoint") && err.contains("folder"),
        "{err}"
    );
    assert!(!err.contains("epoch "), "trained before failing: {err}");
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[test]
fn json_reports_the_test_accuracy_at_the_best_validation_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let out = train(&["--epochs", "8", "--json", p(&json)]);
    ok(&out);
    let v = read_json(&json);
    let epochs = v["epochs"].as_array().unwrap();
    let best = v["best_valid_acc"].as_f64().unwrap();
    let max = epochs
        .iter()
        .map(|e| e["valid_acc"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    assert_eq!(best, max);
    let at = v["best_valid_epoch"].as_u64().unwrap() as usize;
    assert_eq!(epochs[at - 1]["valid_acc"].as_f64().unwrap(), best);
    assert_eq!(
        epochs[at - 1]["test_acc"].as_f64().unwrap(),
        v["test_acc_at_best_valid"].as_f64().unwrap()
    );
    // Test is evaluated only at improvements: the first epoch always, a later one only if
    // its validation accuracy beat all before it.
    let mut so_far = f64::MIN;
    for e in epochs {
        let valid = e["valid_acc"].as_f64().unwrap();
        assert_eq!(e["test_acc"].is_number(), valid > so_far, "{e}");
        so_far = so_far.max(valid);
    }
    assert!(stdout(&out).contains("best valid"), "{}", stdout(&out));
}

#[test]
fn lr_schedules_set_each_epochs_learning_rate() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let lrs = |args: &[&str]| -> Vec<f64> {
        let mut all = vec!["--epochs", "4", "--json", p(&json)];
        all.extend_from_slice(args);
        ok(&train(&all));
        read_json(&json)["epochs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["lr"].as_f64().unwrap())
            .collect()
    };
    let cosine = lrs(&["--lr-schedule", "cosine"]);
    let want = [0.01, 0.008535533905932738, 0.005, 0.0014644660940672626];
    for (got, want) in cosine.iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{cosine:?}");
    }
    let step = lrs(&[
        "--lr-schedule",
        "step",
        "--lr-step-size",
        "2",
        "--lr-gamma",
        "0.5",
    ]);
    assert_eq!(step, vec![0.01, 0.01, 0.005, 0.005]);
    let out = train(&["--lr-schedule", "step"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--lr-step-size"), "{}", stderr(&out));
}

#[test]
fn patience_stops_early_and_the_json_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    ok(&train(&[
        "--epochs",
        "200",
        "--patience",
        "2",
        "--json",
        p(&json),
    ]));
    let v = read_json(&json);
    assert_eq!(v["stopped_early"], true);
    let epochs = v["epochs"].as_array().unwrap();
    assert!(epochs.len() < 200);
    // The last two evaluations did not beat the best.
    let best = v["best_valid_acc"].as_f64().unwrap();
    let n = epochs.len();
    assert!(epochs[n - 2..]
        .iter()
        .all(|e| e["valid_acc"].as_f64().unwrap() <= best));
    assert_eq!(v["best_valid_epoch"].as_u64().unwrap() as usize, n - 2);
    let never = train(&["--patience", "2", "--eval-every", "0"]);
    assert_eq!(never.status.code(), Some(1));
    assert!(stderr(&never).contains("eval_every"), "{}", stderr(&never));
}

#[test]
fn quiet_prints_only_the_final_line_and_verbose_the_phases() {
    let quiet = train(&["--quiet"]);
    ok(&quiet);
    assert_eq!(stderr(&quiet), "");
    assert_eq!(stdout(&quiet).lines().count(), 1, "{}", stdout(&quiet));
    let env_quiet = espalier()
        .env("ESPALIER_LOG", "error")
        .args([
            "train",
            "--dataset",
            DATA,
            "--hidden",
            "16",
            "--epochs",
            "3",
        ])
        .output()
        .unwrap();
    ok(&env_quiet);
    assert_eq!(stderr(&env_quiet), "");
    let verbose = espalier()
        .env("ESPALIER_LOG", "error")
        .args([
            "train",
            "--dataset",
            DATA,
            "--hidden",
            "16",
            "--epochs",
            "3",
        ])
        .arg("--verbose")
        .output()
        .unwrap();
    ok(&verbose);
    let err = stderr(&verbose);
    assert!(err.contains("fwd") && err.contains("lr "), "{err}");
    let default = train(&[]);
    ok(&default);
    let err = stderr(&default);
    assert!(!err.contains("fwd"), "{err}");
    for line in err.lines().filter(|l| l.starts_with("epoch")) {
        assert!(line.len() <= 100, "{} columns: {line}", line.len());
    }
    let bad = espalier()
        .env("ESPALIER_LOG", "loud")
        .args(["train", "--dataset", DATA])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("ESPALIER_LOG"), "{}", stderr(&bad));
}

#[test]
fn full_graph_defaults_to_all_neighbours_and_reports_its_chunks_in_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let o = train(&["--full-graph", "--chunks", "3", "--json", p(&json)]);
    ok(&o);
    assert!(
        stderr(&o).contains("full graph in 3 chunks"),
        "{}",
        stderr(&o)
    );
    let v = read_json(&json);
    assert_eq!(v["config"]["fanouts"], serde_json::json!([-1, -1]));
    for e in v["epochs"].as_array().unwrap() {
        let f = &e["full_graph"];
        assert_eq!(f["chunks"], 3);
        // Three passes of 3 chunks: forward (layer 0), loss (layer 1), backward (layer 0).
        assert_eq!(f["chunk_runs"].as_array().unwrap().len(), 9);
        assert_eq!(f["est_peak_bytes"], f["peak_bytes"]);
        // On the CPU the next chunk is not prepared ahead by default.
        assert_eq!(f["prep_wait_s"], 0.0);
    }
    // Prepared ahead (`--overlap true`): the same losses, to the bit.
    let ahead = dir.path().join("ahead.json");
    let args = ["--full-graph", "--chunks", "3", "--overlap", "true"];
    ok(&train(&[&args[..], &["--json", p(&ahead)]].concat()));
    let w = read_json(&ahead);
    assert_eq!(w["config"]["full_graph"]["overlap"], true);
    let losses = |v: &serde_json::Value| {
        let e = v["epochs"].as_array().unwrap();
        e.iter().map(|e| e["loss"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(losses(&w), losses(&v));
    assert!(
        w["epochs"][0]["full_graph"]["prep_wait_s"]
            .as_f64()
            .unwrap()
            >= 0.0
    );
    // Settings full-graph training cannot honour are errors before training.
    let o = train(&["--overlap", "true"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--full-graph"), "{}", stderr(&o));
    let o = train(&["--full-graph", "--fanouts", "10,10"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("must all be -1"), "{}", stderr(&o));
    let o = train(&["--chunks", "2"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--full-graph"), "{}", stderr(&o));
    let o = train(&["--node-order", "metis"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--full-graph"), "{}", stderr(&o));
    let o = train(&["--full-graph", "--dedup-transfers", "always"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("expected auto, on or off"),
        "{}",
        stderr(&o)
    );
    let o = train(&["--full-graph", "--node-order", "bfs"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("expected id, metis or grem"),
        "{}",
        stderr(&o)
    );
    for flag in [["--partitioner", "betty"], ["--loader", "per-micro-batch"]] {
        let o = train(&["--full-graph", flag[0], flag[1]]);
        assert!(!o.status.success(), "{flag:?}");
        assert!(
            stderr(&o).contains("--partitioner and --loader do not apply"),
            "{}",
            stderr(&o)
        );
    }
}

/// `espalier train ARGS` under a file-size limit of about 1 KB (`ulimit -f 2`), with
/// SIGXFSZ ignored: a write past it fails with EFBIG, as a full disk fails with ENOSPC.
#[cfg(unix)]
fn train_with_tiny_file_limit(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 2 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "train",
            "--dataset",
            DATA,
            "--hidden",
            "16",
            "--epochs",
            "2",
        ])
        .args(args)
        .env_remove("ESPALIER_LOG")
        .output()
        .expect("run espalier under sh")
}

/// A JSON or checkpoint write that fails (the disk full) removes its temporary file, and
/// the error names the file the user asked for, not the temporary name.
#[cfg(unix)]
#[test]
fn a_failed_write_names_the_output_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let ck = dir.path().join("ck.safetensors");
    for (flag, path) in [("--json", &json), ("--checkpoint", &ck)] {
        let o = train_with_tiny_file_limit(&[flag, p(path)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains(&format!("error: {}: ", path.display())),
            "{flag}: {err}"
        );
        assert!(!err.contains(".tmp."), "{flag}: {err}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "{flag}: left {left:?}");
    }
}

/// The JSON of a resumed run covers every process of the run: its micro-batch statistics
/// hold every epoch's batches, its seconds add up, its peak is the largest; resuming a
/// finished run reports what the finished run reported, not zeros.
#[test]
fn a_resumed_runs_json_covers_every_process_and_a_finished_one_keeps_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck.safetensors");
    let (first, second, again) = (
        dir.path().join("first.json"),
        dir.path().join("second.json"),
        dir.path().join("again.json"),
    );
    ok(&train(&[
        "--epochs",
        "2",
        "--checkpoint",
        p(&ckpt),
        "--json",
        p(&first),
    ]));
    let args = [
        "--epochs",
        "4",
        "--resume",
        p(&ckpt),
        "--checkpoint",
        p(&ckpt),
    ];
    ok(&train(&[&args[..], &["--json", p(&second)]].concat()));
    ok(&train(&[&args[..], &["--json", p(&again)]].concat()));
    let (first, second, again) = (read_json(&first), read_json(&second), read_json(&again));
    let batch_epochs = |v: &serde_json::Value| -> Vec<u64> {
        v["micro_batches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["epoch"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(batch_epochs(&first), vec![1, 2]);
    assert_eq!(batch_epochs(&second), vec![1, 2, 3, 4]);
    assert_eq!(second["micro_batches"][0], first["micro_batches"][0]);
    let seconds = |v: &serde_json::Value| v["train_seconds"].as_f64().unwrap();
    let peak = |v: &serde_json::Value| v["peak_bytes"].as_u64().unwrap();
    assert!(seconds(&second) > seconds(&first), "{second}");
    assert!(
        peak(&second) >= peak(&first) && peak(&first) > 0,
        "{second}"
    );
    // The run was finished: the third process trains nothing and reports the second's.
    assert_eq!(again["already_finished"], true);
    for key in [
        "micro_batches",
        "train_seconds",
        "peak_bytes",
        "test_acc",
        "epochs",
    ] {
        assert_eq!(again[key], second[key], "{key}");
    }
}

/// A second Ctrl-C quits at once, mid-epoch, but first writes the JSON of the epochs
/// finished so far (marked interrupted), rather than none.
#[test]
fn a_second_sigint_quits_at_once_and_still_writes_the_json() {
    // Epochs long enough (hundreds of milliseconds) that both signals land in one.
    let run = [
        "--dataset",
        "synthetic:cora-like",
        "--hidden",
        "1024",
        "--fanouts",
        "25,25",
    ];
    let (rest, code, v) = interrupted(&run, &["-INT", "-INT"]);
    assert_eq!(code, Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("second interrupt")),
        "{rest:?}"
    );
    assert_eq!(v["interrupted"], true);
    let n = v["epochs"].as_array().unwrap().len();
    assert!(n >= 2, "{n} epochs");
    assert_eq!(v["micro_batches"].as_array().unwrap().len(), n);
}

/// A dataset whose split has no validation file: the run says so before training, and its
/// final line shows no `NaN` (the accuracies it could not measure read `-`).
#[test]
fn an_empty_validation_split_is_said_and_printed_as_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ds");
    let gen = espalier()
        .args(["gen", "cora-like,scale=0.1", "--out", p(&data)])
        .output()
        .unwrap();
    ok(&gen);
    std::fs::remove_file(data.join("split/bench/valid.csv.gz")).unwrap();
    let out = espalier()
        .args([
            "train",
            "--dataset",
            p(&data),
            "--hidden",
            "8",
            "--epochs",
            "2",
        ])
        .args(["--no-cache"])
        .output()
        .unwrap();
    ok(&out);
    let (said, line) = (stderr(&out), stdout(&out));
    assert!(
        said.contains("warning: ") && said.contains("validation split has no labelled node"),
        "{said}"
    );
    assert!(line.contains("valid accuracy -"), "{line}");
    assert!(
        !line.contains("NaN") && !line.contains("best valid"),
        "{line}"
    );
}
