//! `espalier partition --compare` and `--graph-only` through the binary.

use std::process::{Command, Output};

const DATA: &str = "synthetic:cora-like,scale=0.3";

fn espalier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .output()
        .expect("the espalier binary runs")
}

/// Fails on a panic (exit status 101 and Rust's panic message).
fn no_panic(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

#[test]
fn compare_json_has_every_partitioner() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("partition_compare.json");
    let path = path.to_str().unwrap();
    let out = espalier(&[
        "partition",
        "--dataset",
        DATA,
        "--micro-batches",
        "4",
        "--compare",
        "--json",
        path,
    ]);
    no_panic(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = v["micro_batches"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["partitioner"].as_str().unwrap())
        .collect();
    assert_eq!(names, espalier::partition::names());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for e in entries {
        assert_eq!(e["k"], 4, "{e}");
        assert!(e["redundancy"].as_f64().unwrap() >= 1.0, "{e}");
        let batches = e["batches"].as_array().unwrap();
        assert_eq!(batches.len(), 4);
        assert!(batches.iter().all(|b| b["peak_bytes"].as_u64().is_some()));
        // The table's largest/smallest ratios are the JSON's peaks'.
        let name = e["partitioner"].as_str().unwrap();
        let row: Vec<&str> = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{stdout}"))
            .split_whitespace()
            .collect();
        let spread = |key: &str| {
            let v: Vec<f64> = batches.iter().map(|b| b[key].as_f64().unwrap()).collect();
            let max = v.iter().cloned().fold(0.0, f64::max);
            let min = v.iter().cloned().fold(f64::MAX, f64::min);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            (max / min, max / mean)
        };
        // Columns: name, ep/b, K, redundancy, est. max and min (value and unit each),
        // max/min, max/mean, peak max and min (value and unit), max/min, seconds.
        let col = |i: usize| -> f64 { row[i].parse().unwrap_or_else(|_| panic!("{row:?}")) };
        let (est_ratio, est_mean) = spread("est_peak_bytes");
        assert!((col(8) - est_ratio).abs() < 1e-3, "{row:?}: {est_ratio}");
        assert!((col(9) - est_mean).abs() < 1e-3, "{row:?}: {est_mean}");
        let (peak_ratio, _) = spread("peak_bytes");
        assert!((col(14) - peak_ratio).abs() < 1e-3, "{row:?}: {peak_ratio}");
        assert!(col(8) >= 1.0 && col(14) >= 1.0, "{row:?}");
    }
}

#[test]
fn graph_only_compare_prints_both() {
    let out = espalier(&["partition", "--dataset", DATA, "--graph-only", "--compare"]);
    no_panic(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["grem", "metis"] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{text}"));
        let fraction: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&fraction), "{row}");
    }
}

#[test]
fn bad_values_are_errors() {
    let cases: &[&[&str]] = &[
        &["partition", "--dataset", DATA, "--partitioner", "nope"],
        &[
            "partition",
            "--dataset",
            DATA,
            "--partitioner",
            "nope",
            "--compare",
        ],
        &[
            "partition",
            "--dataset",
            DATA,
            "--graph-only",
            "--parts",
            "0",
            "--compare",
        ],
        &[
            "partition",
            "--dataset",
            DATA,
            "--graph-only",
            "--partitioner",
            "betty",
        ],
        &[
            "partition",
            "--dataset",
            DATA,
            "--micro-batches",
            "0",
            "--compare",
        ],
    ];
    for args in cases {
        let out = espalier(args);
        no_panic(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_docs_partitioner_table_equals_the_registry_and_the_help_lists_it() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/PARTITIONING.md"
    ))
    .unwrap();
    let header = "| `--partitioner` | what it does |\n|---|---|\n";
    let at = docs
        .find(header)
        .expect("docs/PARTITIONING.md has no partitioner table")
        + header.len();
    let table: Vec<(String, String)> = docs[at..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].trim_matches('`').to_string(), cells[1].to_string())
        })
        .collect();
    let registry: Vec<(String, String)> = espalier::partition::REGISTRY
        .iter()
        .map(|e| (e.name.to_string(), e.about.to_string()))
        .collect();
    assert_eq!(
        table, registry,
        "docs/PARTITIONING.md's table is not the registry"
    );
    let help = espalier::partition::help();
    for e in espalier::partition::REGISTRY {
        assert!(help.contains(e.about), "{help}");
        // The constructor makes the partitioner the name says.
        assert_eq!((e.make)().name(), e.name);
    }
}
