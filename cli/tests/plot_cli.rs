//! `espalier plot` through the binary: training runs and a benchmark drawn as SVG and PNG,
//! with the legend's labels, and errors that name the file at fault.

use std::path::Path;
use std::process::{Command, Output};

fn espalier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .output()
        .expect("the espalier binary runs")
}

fn ok(args: &[&str]) {
    let out = espalier(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fails_naming(args: &[&str], needle: &str) {
    let out = espalier(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: `{needle}` not in {err}");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const RUN: &[&str] = &["--epochs", "3", "--hidden", "8", "--fanouts", "5,5"];

#[test]
fn runs_and_a_benchmark_plot_to_svg_and_png_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let (k1, k4, bench) = (
        dir.path().join("k1.json"),
        dir.path().join("k4.json"),
        dir.path().join("bench.json"),
    );
    for (json, k) in [(&k1, "1"), (&k4, "4")] {
        let mut a = vec!["train", "--micro-batches", k, "--json", s(json)];
        a.extend(RUN);
        ok(&a);
    }
    ok(&[
        "bench",
        "--epochs",
        "1",
        "--warmup",
        "0",
        "--hidden",
        "8",
        "--fanouts",
        "5,5",
        "--json",
        s(&bench),
    ]);

    let svg = dir.path().join("runs.svg");
    ok(&[
        "plot",
        s(&k1),
        s(&k4),
        s(&bench),
        "--label",
        "K=1,K=4,bench-run",
        "--out",
        s(&svg),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.len() > 10_000, "{} bytes", text.len());
    for label in [
        "K=1",
        "K=4",
        "bench-run",
        "Training loss",
        "Accuracy",
        "Peak memory",
        "forward",
        "backward",
        "estimated peak",
    ] {
        assert!(text.contains(label), "`{label}` missing from the SVG");
    }

    // Without --label the file names label the runs; PNG output is a real PNG.
    let png = dir.path().join("runs.png");
    ok(&["plot", s(&k1), s(&k4), "--out", s(&png)]);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let svg2 = dir.path().join("names.svg");
    ok(&["plot", s(&k1), s(&k4), "--out", s(&svg2)]);
    let text = std::fs::read_to_string(&svg2).unwrap();
    assert!(
        text.contains(">k1") || text.contains("k1 "),
        "file-name labels"
    );
}

#[test]
fn bad_inputs_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"epochs\": [").unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(&other, "{\"hello\": 1}").unwrap();
    let wrong = dir.path().join("wrong.json");
    std::fs::write(&wrong, "{\"epochs\": [{\"loss\": \"high\"}]}").unwrap();
    let out = dir.path().join("x.svg");
    fails_naming(&["plot", s(&broken), "--out", s(&out)], "broken.json");
    fails_naming(&["plot", s(&other), "--out", s(&out)], "other.json");
    fails_naming(&["plot", s(&wrong), "--out", s(&out)], "wrong.json");
    fails_naming(
        &["plot", s(&dir.path().join("absent.json")), "--out", s(&out)],
        "absent.json",
    );
    fails_naming(
        &["plot", s(&other), "--out", s(&dir.path().join("x.jpg"))],
        ".svg or .png",
    );
    fails_naming(
        &["plot", s(&other), "--label", "a,b", "--out", s(&out)],
        "--label",
    );
    assert!(!out.exists(), "no image is left behind by a failed plot");
}

/// `partition --compare` runs every partitioner: the plot draws each one's micro-batches
/// (it drew only the last), and names the epoch as the JSON does (it said one more).
#[test]
fn a_partition_comparison_plots_every_partitioner() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    ok(&[
        "partition",
        "--compare",
        "--dataset",
        "synthetic:cora-like,scale=0.2",
        "--hidden",
        "8",
        "--fanouts",
        "5,5",
        "--json",
        s(&json),
    ]);
    let svg = dir.path().join("cmp.svg");
    ok(&["plot", s(&json), "--out", s(&svg)]);
    let text = std::fs::read_to_string(&svg).unwrap();
    for name in espalier::partition::names() {
        assert!(
            text.contains(&format!("epoch 1, batch 1, K 8, {name})")),
            "{name} not drawn"
        );
    }
}

/// A full-graph run's JSON has no micro-batches but chunks: the plot draws their peaks.
#[test]
fn a_full_graph_run_plots_its_chunks_memory() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fg.json");
    let mut a = vec![
        "train",
        "--full-graph",
        "--chunks",
        "2",
        "--layers",
        "2",
        "--json",
        s(&json),
    ];
    a.extend(["--epochs", "2", "--hidden", "8"]);
    ok(&a);
    let svg = dir.path().join("fg.svg");
    let out = espalier(&["plot", s(&json), "--out", s(&svg)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 panels"), "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("epoch 2, full graph, 2 chunks per layer"),
        "no chunk panel"
    );
}
