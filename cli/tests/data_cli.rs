//! `espalier gen` and `espalier cache` through the binary: what a user sees and trusts.

use std::path::Path;
use std::process::{Command, Output};

fn espalier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .env_remove("ESPALIER_CACHE")
        .env_remove("ESPALIER_DATA")
        .output()
        .expect("the espalier binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn no_panic(o: &Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(o.status.code(), Some(101), "{err}");
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn gen_refuses_a_non_empty_folder_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("g");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = espalier(&["gen", "cora-like,scale=0.1", "--out", out.to_str().unwrap()]);
    no_panic(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(files_under(&out), vec!["notes.txt"]);
}

#[test]
fn gen_force_replaces_the_dataset_and_removes_the_stale_split() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("g");
    let o = espalier(&["gen", "cora-like,scale=0.5", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Progress: each file is reported as it is written.
    assert!(stderr(&o).contains("raw/edge.csv.gz"), "{}", stderr(&o));
    // A split that the new dataset does not have (as an older gen or a user left).
    let stale = out.join("split/old/train.csv.gz");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    std::fs::copy(out.join("split/bench/train.csv.gz"), &stale).unwrap();
    let o = espalier(&[
        "gen",
        "cora-like,scale=0.1",
        "--out",
        out.to_str().unwrap(),
        "--force",
    ]);
    no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let files = files_under(&out);
    assert!(!files.iter().any(|f| f.contains("old")), "{files:?}");
    assert!(!files.iter().any(|f| f.contains(".tmp")), "{files:?}");
    // The default split (first by name) is the new one and the data loads.
    let d = espalier::graph::Dataset::load(
        &out,
        &espalier::graph::LoadOptions {
            cache: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(d.num_nodes(), 271);
}

/// A small OGB folder written by `gen`.
fn small_dataset(dir: &Path) {
    let o = espalier(&["gen", "cora-like,scale=0.1", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn train_prints_where_the_cache_is_written_and_cache_ls_clear_see_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ds");
    small_dataset(&data);
    let cache_dir = tmp.path().join("cache");
    let base = [
        "partition",
        "--dataset",
        data.to_str().unwrap(),
        "--cache-dir",
        cache_dir.to_str().unwrap(),
        "--graph-only",
        "--partitioner",
        "metis",
    ];
    let o = espalier(&base);
    no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("dataset cache: wrote") && stderr(&o).contains("cache"),
        "{}",
        stderr(&o)
    );
    // Another seed and width: the same entry is read.
    let mut again = base.to_vec();
    again.extend(["--seed", "4", "--feat-dim", "8"]);
    let o = espalier(&again);
    assert!(stderr(&o).contains("dataset cache: read"), "{}", stderr(&o));
    // The symmetrized graph (--symmetrize defaults to true) is kept beside the entry.
    assert_eq!(
        stderr(&o).matches("dataset cache: read").count(),
        2,
        "{}",
        stderr(&o)
    );
    let ls = espalier(&["cache", "ls", "--cache-dir", cache_dir.to_str().unwrap()]);
    assert!(ls.status.success(), "{}", stderr(&ls));
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains("ds") && text.contains("2 entries"), "{text}");
    assert!(text.contains("(symmetrized)"), "{text}");
    assert!(text.contains(" UTC"), "{text}");
    let clear = espalier(&[
        "cache",
        "clear",
        "--cache-dir",
        cache_dir.to_str().unwrap(),
        "--dataset",
        data.to_str().unwrap(),
    ]);
    assert!(clear.status.success(), "{}", stderr(&clear));
    assert!(
        String::from_utf8_lossy(&clear.stdout).contains("removed 2 files"),
        "{}",
        String::from_utf8_lossy(&clear.stdout)
    );
    assert!(espalier::graph::io::cache::list(&cache_dir)
        .unwrap()
        .is_empty());
}

#[test]
fn default_cache_is_a_visible_folder_beside_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ds");
    small_dataset(&data);
    let o = espalier(&[
        "partition",
        "--dataset",
        data.to_str().unwrap(),
        "--graph-only",
        "--partitioner",
        "metis",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The entry and its symmetrized graph.
    assert_eq!(
        espalier::graph::io::cache::list(&data.join("espalier-cache"))
            .unwrap()
            .len(),
        2
    );
    assert!(!data.join(".espalier-cache").exists());
}

#[test]
fn synthetic_dataset_line_shows_seed_and_widths_used() {
    let o = espalier(&[
        "partition",
        "--dataset",
        "synthetic:cora-like,scale=0.2",
        "--seed",
        "3",
        "--feat-dim",
        "16",
        "--classes",
        "5",
        "--graph-only",
        "--partitioner",
        "metis",
    ]);
    no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("cora-like,scale=0.2,seed=3,feat_dim=16,classes=5")
            && err.contains("16 features, 5 classes"),
        "{err}"
    );
}

#[test]
fn a_missing_named_dataset_says_where_to_put_it() {
    let tmp = tempfile::tempdir().unwrap();
    let o = espalier(&[
        "partition",
        "--dataset",
        "ogbn-products",
        "--data-root",
        tmp.path().to_str().unwrap(),
        "--graph-only",
        "--partitioner",
        "metis",
    ]);
    no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("ogbn_products/raw/edge.csv.gz") && err.contains("does not download"),
        "{err}"
    );
}

/// A process id that runs nowhere on this machine.
#[cfg(target_os = "linux")]
fn dead_pid() -> u32 {
    (1..4_000_000u32)
        .rev()
        .find(|p| !Path::new("/proc").join(p.to_string()).exists())
        .unwrap()
}

/// A run killed while writing a cache entry leaves its temporary file: `cache clear`
/// removes it (not only after an hour), but not the file of a writer still running.
#[cfg(target_os = "linux")]
#[test]
fn cache_clear_removes_a_killed_writers_temp_file_but_not_a_live_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    std::fs::create_dir(&cache_dir).unwrap();
    let killed = format!(".ds-0123456789abcdef.espc.tmp.{}.0", dead_pid());
    let live = format!(".ds-0123456789abcdef.espc.tmp.{}.1", std::process::id());
    for name in [&killed, &live] {
        std::fs::write(cache_dir.join(name), vec![0u8; 4096]).unwrap();
    }
    let clear = espalier(&["cache", "clear", "--cache-dir", cache_dir.to_str().unwrap()]);
    assert!(clear.status.success(), "{}", stderr(&clear));
    assert_eq!(files_under(&cache_dir), vec![live.clone()]);
    let out = String::from_utf8_lossy(&clear.stdout);
    assert!(out.contains("removed 1 files, 4.00 KiB"), "{out}");
}
