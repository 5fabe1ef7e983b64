//! Dataset loaders: OGB layout, edge lists, the binary cache, the writer and the synthetic
//! generator. Every bad input must come back as a typed error naming the file and line.

use std::io::Write;
use std::path::{Path, PathBuf};

use espalier::graph::dataset::UNLABELED;
use espalier::graph::io::cache::{self, CacheStatus};
use espalier::graph::io::{ogb, write_ogb};
use espalier::graph::synth::{self, SynthSpec};
use espalier::graph::{Dataset, LoadOptions};
use espalier::Error;

fn gz_bytes(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

fn put(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, gz_bytes(text)).unwrap();
}

/// A valid 4-node dataset; `tweak` overrides files (None removes one).
fn ogb_dir(tweak: &[(&str, Option<&str>)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut files = vec![
        ("raw/edge.csv.gz", Some("0,1\n1,2\n2,3\n3,0\n0,2\n")),
        ("raw/num-node-list.csv.gz", Some("4\n")),
        ("raw/num-edge-list.csv.gz", Some("5\n")),
        ("raw/node-feat.csv.gz", Some("0.5,1\n1,2\n-1,0\n3,4e-3\n")),
        ("raw/node-label.csv.gz", Some("0\n1\n\n2\n")),
        ("split/s/train.csv.gz", Some("0\n1\n")),
        ("split/s/valid.csv.gz", Some("2\n")),
        ("split/s/test.csv.gz", Some("3\n")),
    ];
    for (rel, text) in tweak {
        match files.iter_mut().find(|(r, _)| r == rel) {
            Some(f) => f.1 = *text,
            None => files.push((rel, *text)),
        }
    }
    for (rel, text) in files {
        if let Some(t) = text {
            put(d, rel, t);
        }
    }
    tmp
}

fn no_cache() -> LoadOptions {
    LoadOptions {
        cache: false,
        ..LoadOptions::default()
    }
}

/// Asserts a parse error in the file ending with `file`, at `line`, whose message holds
/// `word`.
fn assert_parse(r: espalier::Result<Dataset>, file: &str, line: u64, word: &str) {
    match r {
        Err(Error::Parse { path, line: l, msg }) => {
            assert!(
                path.ends_with(file),
                "error names {path:?}, expected {file}"
            );
            assert_eq!(l, line, "line of {msg:?}");
            assert!(
                msg.to_lowercase().contains(word),
                "message {msg:?} lacks {word:?}"
            );
        }
        other => panic!("expected a parse error in {file}:{line}, got {other:?}"),
    }
}

#[test]
fn small_ogb_folder_loads_exactly() {
    let tmp = ogb_dir(&[]);
    let d = Dataset::load(tmp.path(), &no_cache()).unwrap();
    assert_eq!(d.num_nodes(), 4);
    assert_eq!(d.num_edges(), 5);
    assert_eq!(d.graph.neighbors(2), &[1, 0]);
    assert_eq!(d.feat_dim, 2);
    assert_eq!(d.features, vec![0.5, 1.0, 1.0, 2.0, -1.0, 0.0, 3.0, 4e-3]);
    assert_eq!(d.labels, vec![0, 1, UNLABELED, 2]);
    assert_eq!(d.num_classes, 3);
    assert_eq!(
        (
            d.split.train.clone(),
            d.split.valid.clone(),
            d.split.test.clone()
        ),
        (vec![0, 1], vec![2], vec![3])
    );
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}

#[test]
fn missing_required_files_are_io_errors() {
    for file in ["raw/edge.csv.gz", "raw/num-node-list.csv.gz"] {
        let tmp = ogb_dir(&[(file, None)]);
        match Dataset::load(tmp.path(), &no_cache()) {
            Err(Error::Io { path, source }) => {
                assert!(path.ends_with(file), "{path:?}");
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("expected an I/O error for {file}, got {other:?}"),
        }
    }
    let tmp = ogb_dir(&[("split/s/train.csv.gz", None)]);
    assert!(matches!(
        Dataset::load(tmp.path(), &no_cache()),
        Err(Error::Io { path, .. }) if path.ends_with("split/s/train.csv.gz")
    ));
}

#[test]
fn malformed_edges() {
    let e = "raw/edge.csv.gz";
    let tmp = ogb_dir(&[(e, Some("0,1\n1,x\n2,3\n3,0\n0,2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 2, "integer");
    let tmp = ogb_dir(&[(e, Some("0,1\n1,2\n2,3,1\n3,0\n0,2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 3, "columns");
    let tmp = ogb_dir(&[(e, Some("0,1\n1,2\n2,3\n3\n0,2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 4, "columns");
    let tmp = ogb_dir(&[(e, Some("0,1\n1,2\n2,3\n3,0\n0,4\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 5, "out of range");
    let tmp = ogb_dir(&[(e, Some("0,1\n-1,2\n2,3\n3,0\n0,2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 2, "negative");
    let tmp = ogb_dir(&[(e, Some("0,1\n1,2\n2,3\n3,0\n"))]);
    assert_parse(
        Dataset::load(tmp.path(), &no_cache()),
        "raw/num-edge-list.csv.gz",
        1,
        "edges",
    );
    let tmp = ogb_dir(&[("raw/num-node-list.csv.gz", Some("four\n"))]);
    assert_parse(
        Dataset::load(tmp.path(), &no_cache()),
        "raw/num-node-list.csv.gz",
        1,
        "integer",
    );
}

#[test]
fn malformed_features() {
    let f = "raw/node-feat.csv.gz";
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1,0,7\n3,4\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 3, "columns");
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1\n3,4\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 3, "columns");
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1,zero\n3,4\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 3, "not a number");
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1,\n3,4\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 3, "empty");
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1,0\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 4, "rows");
    let tmp = ogb_dir(&[(f, Some("0.5,1\n1,2\n-1,0\n3,4\n5,6\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), f, 5, "rows");
}

#[test]
fn malformed_labels() {
    let l = "raw/node-label.csv.gz";
    let tmp = ogb_dir(&[(l, Some("0\n1\n-1\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 3, "negative");
    let tmp = ogb_dir(&[(l, Some("0\n1.5\n1\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 2, "integer");
    let tmp = ogb_dir(&[(l, Some("0\n1\ncat\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 3, "not a number");
    let tmp = ogb_dir(&[(l, Some("0\n1\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 4, "rows");
    // Integral floats and NaN (as pandas writes a column with missing values) are fine.
    let tmp = ogb_dir(&[(l, Some("0.0\nnan\n1\n2.0\n"))]);
    let d = Dataset::load(tmp.path(), &no_cache()).unwrap();
    assert_eq!(d.labels, vec![0, UNLABELED, 1, 2]);
    // A fixed class count turns a larger label into an error...
    let tmp = ogb_dir(&[]);
    let two = LoadOptions {
        classes: Some(2),
        ..no_cache()
    };
    assert_parse(Dataset::load(tmp.path(), &two), l, 4, "classes");
    // ...and is kept when larger than needed.
    let five = LoadOptions {
        classes: Some(5),
        ..no_cache()
    };
    assert_eq!(Dataset::load(tmp.path(), &five).unwrap().num_classes, 5);
}

#[test]
fn malformed_splits() {
    let t = "split/s/test.csv.gz";
    let tmp = ogb_dir(&[(t, Some("3\n7\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), t, 2, "out of range");
    let tmp = ogb_dir(&[(t, Some("3\n\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), t, 2, "empty");
    let tmp = ogb_dir(&[]);
    let opts = LoadOptions {
        split: Some("nope".into()),
        ..no_cache()
    };
    match Dataset::load(tmp.path(), &opts) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("available: s"), "{m}"),
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
    // The first split in alphabetical order is the default.
    let tmp = ogb_dir(&[
        ("split/a/train.csv.gz", Some("3\n")),
        ("split/a/valid.csv.gz", Some("0\n")),
    ]);
    let d = Dataset::load(tmp.path(), &no_cache()).unwrap();
    assert_eq!(
        (d.split.train, d.split.valid, d.split.test),
        (vec![3], vec![0], vec![])
    );
}

#[test]
fn broken_gzip_names_the_file() {
    let e = "raw/edge.csv.gz";
    let text: String = (0..20_000)
        .map(|i| format!("{},{}\n", i % 4, (i + 1) % 4))
        .collect();
    let good = gz_bytes(&text);
    let tmp = ogb_dir(&[("raw/num-edge-list.csv.gz", None)]);
    let path = tmp.path().join(e);
    // Truncated.
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 0, "gzip");
    // Corrupt: a damaged trailer (CRC) and damaged deflate data.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 6] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 0, "gzip");
    let mut bad = good.clone();
    for b in &mut bad[20..60] {
        *b = 0xff;
    }
    std::fs::write(&path, &bad).unwrap();
    assert!(matches!(
        Dataset::load(tmp.path(), &no_cache()),
        Err(Error::Parse { path, .. }) if path.ends_with(e)
    ));
    // Not gzip at all.
    std::fs::write(&path, b"0,1\n").unwrap();
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 0, "gzip");
}

#[test]
fn missing_parts_are_synthesized_with_notes() {
    let tmp = ogb_dir(&[
        ("raw/node-feat.csv.gz", None),
        ("raw/node-label.csv.gz", None),
        ("split/s/train.csv.gz", None),
        ("split/s/valid.csv.gz", None),
        ("split/s/test.csv.gz", None),
    ]);
    assert!(!tmp.path().join("split").exists());
    let opts = LoadOptions {
        feat_dim: Some(3),
        classes: Some(6),
        seed: 5,
        ..no_cache()
    };
    let d = Dataset::load(tmp.path(), &opts).unwrap();
    assert_eq!((d.feat_dim, d.features.len(), d.num_classes), (3, 12, 6));
    assert!(d.labels.iter().all(|&l| l < 6));
    assert_eq!(d.split.train.len(), 1);
    assert_eq!(d.notes.len(), 3, "{:?}", d.notes);
    assert!(d.notes[0].contains("node-feat") && d.notes[0].contains('3'));
    assert!(d.notes[1].contains("6 classes"));
    assert!(d.notes[2].contains("8% train"));
    // Same seed, same data; another seed, other data.
    assert_eq!(Dataset::load(tmp.path(), &opts).unwrap(), d);
    let other = LoadOptions { seed: 6, ..opts };
    assert_ne!(
        Dataset::load(tmp.path(), &other).unwrap().features,
        d.features
    );
}

#[test]
fn edge_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("g.txt");
    std::fs::write(
        &p,
        "# a comment\n% another\n0 1\n1\t2 0.5\n\n2,5\n  3 0 1.0 1234\n",
    )
    .unwrap();
    let d = Dataset::load_uncached(&p, &no_cache()).unwrap();
    assert_eq!((d.num_nodes(), d.num_edges(), d.name.as_str()), (6, 4, "g"));
    assert_eq!(d.graph.neighbors(0), &[3]);
    assert_eq!(d.graph.neighbors(5), &[2]);
    assert_eq!(d.feat_dim, 100);
    assert_eq!(d.notes.len(), 4, "{:?}", d.notes);
    assert!(d.notes[0].contains("read as an edge list"), "{:?}", d.notes);
    // Gzip and errors with line numbers.
    let pz = tmp.path().join("g.txt.gz");
    std::fs::write(&pz, gz_bytes("0 1\n1 2\n2 x\n")).unwrap();
    assert_parse(Dataset::load(&pz, &no_cache()), "g.txt.gz", 3, "integer");
    std::fs::write(&p, "0 1\n# c\n7\n").unwrap();
    assert_parse(Dataset::load(&p, &no_cache()), "g.txt", 3, "columns");
    std::fs::write(&p, "0 1\n1 -2\n").unwrap();
    assert_parse(Dataset::load(&p, &no_cache()), "g.txt", 2, "negative");
    std::fs::write(&p, "0 1\n1 99999999999\n").unwrap();
    assert_parse(Dataset::load(&p, &no_cache()), "g.txt", 2, "out of range");
    let split = LoadOptions {
        split: Some("x".into()),
        ..no_cache()
    };
    assert!(matches!(
        Dataset::load(&pz, &split),
        Err(Error::InvalidArgument(_))
    ));
    std::fs::write(&p, "# nothing\n").unwrap();
    assert!(matches!(
        Dataset::load(&p, &no_cache()),
        Err(Error::Parse { .. })
    ));
}

fn shared(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data")).join(name);
    if p.join("raw").is_dir() {
        Some(p)
    } else {
        println!("skipped: {} not found", p.display());
        None
    }
}

#[test]
fn cora() {
    let Some(dir) = shared("cora") else { return };
    let d = Dataset::load(&dir, &no_cache()).unwrap();
    assert_eq!(d.name, "cora");
    assert_eq!((d.num_nodes(), d.num_edges()), (2708, 5429));
    assert_eq!((d.feat_dim, d.num_classes), (1433, 7));
    assert_eq!(
        (d.split.train.len(), d.split.valid.len(), d.split.test.len()),
        (140, 500, 1000)
    );
    assert!(d.notes.is_empty());
    assert!(d.features.iter().all(|&x| x == 0.0 || x == 1.0));
    for c in 0..7 {
        let n = d
            .split
            .train
            .iter()
            .filter(|&&v| d.labels[v as usize] == c)
            .count();
        assert_eq!(n, 20, "class {c}");
    }
    let named = LoadOptions {
        split: Some("per-class-20".into()),
        ..no_cache()
    };
    assert_eq!(Dataset::load(&dir, &named).unwrap(), d);
    assert_eq!(d.graph.symmetrize().num_edges(), 10_556);
}

#[test]
fn email_enron_with_cache_outside_the_read_only_folder() {
    let Some(dir) = shared("email-enron") else {
        return;
    };
    let cache_dir = tempfile::tempdir().unwrap();
    let env_dir = cache_dir.path().as_os_str().to_owned();
    let env = |k: &str| (k == "XDG_CACHE_HOME").then(|| env_dir.clone());
    if std::fs::metadata(&dir).unwrap().permissions().readonly() {
        // Shared data is read-only: the cache goes to the fallback, even for root, and
        // says why.
        let dirs = cache::cache_dirs(&dir, None, &env);
        assert_eq!(dirs.len(), 1);
        assert_eq!(dirs[0].path, cache_dir.path().join("espalier"));
        assert!(dirs[0].fallback.as_ref().unwrap().contains("read-only"));
    }
    // Never write next to shared data, whatever its permissions.
    let dirs = vec![cache_dir.path().to_path_buf()];
    let opts = LoadOptions::default();
    let (d, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert_eq!((d.num_nodes(), d.num_edges()), (36_692, 183_831));
    assert_eq!((d.feat_dim, d.num_classes), (100, 10));
    assert!(
        d.notes.iter().any(|n| n.contains("node-feat")),
        "{:?}",
        d.notes
    );
    assert_eq!(d.split.train.len(), (0.08f64 * 36_692.0).round() as usize);
    assert!(
        matches!(&status, CacheStatus::Written { path, .. } if path.starts_with(cache_dir.path())),
        "{status:?}"
    );
    let (again, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Hit(_)), "{status:?}");
    assert_eq!(again, d);
}

#[test]
fn cache_hit_stale_and_corrupt() {
    let tmp = ogb_dir(&[("raw/node-feat.csv.gz", None)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let dirs = vec![cache_dir.path().to_path_buf()];
    let opts = LoadOptions {
        feat_dim: Some(4),
        ..LoadOptions::default()
    };
    let (d, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    let CacheStatus::Written { path: file, .. } = status else {
        panic!("expected a written cache, got {status:?}")
    };
    assert!(file.starts_with(cache_dir.path()));
    // Hit: identical dataset, notes included.
    let (hit, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    assert_eq!(status, CacheStatus::Hit(file.clone()));
    assert_eq!(hit, d);
    assert_eq!(hit.notes.len(), 1);
    // Options that only change the synthesized stand-ins read the same entry.
    let wide = LoadOptions {
        feat_dim: Some(5),
        seed: 3,
        ..opts.clone()
    };
    let (w, status) = Dataset::load_in_dirs(tmp.path(), &wide, &dirs).unwrap();
    assert_eq!(status, CacheStatus::Hit(file.clone()));
    assert_eq!(w.feat_dim, 5);
    assert_eq!(std::fs::read_dir(cache_dir.path()).unwrap().count(), 1);
    // Stale: an input changed (size and time) -> re-parsed and rewritten.
    put(tmp.path(), "raw/edge.csv.gz", "0,1\n1,2\n2,3\n3,0\n0,3\n");
    let (fresh, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    match &status {
        CacheStatus::Rewritten { path, reason } => {
            assert_eq!(path, &file);
            assert!(reason.contains("stale"), "{reason}");
        }
        other => panic!("expected a rewritten cache, got {other:?}"),
    }
    assert_eq!(fresh.graph.neighbors(3), &[2, 0]);
    // Same size, only the modification time differs: still stale.
    let f = std::fs::File::options()
        .write(true)
        .open(tmp.path().join("raw/node-label.csv.gz"))
        .unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1e9 as u64))
        .unwrap();
    drop(f);
    let (_, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    assert!(
        matches!(status, CacheStatus::Rewritten { .. }),
        "{status:?}"
    );
    assert!(matches!(
        Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap().1,
        CacheStatus::Hit(_)
    ));
    // Corrupt: a flipped byte in the data, then a truncated file.
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 20] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let (again, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    match &status {
        CacheStatus::Rewritten { reason, .. } => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected a rewritten cache, got {other:?}"),
    }
    assert_eq!(again, fresh);
    std::fs::write(&file, &bytes[..n / 2]).unwrap();
    let (again, status) = Dataset::load_in_dirs(tmp.path(), &opts, &dirs).unwrap();
    assert!(
        matches!(status, CacheStatus::Rewritten { .. }),
        "{status:?}"
    );
    assert_eq!(again, fresh);
    // Cache off: never touches the folder.
    let off = LoadOptions {
        cache: false,
        ..opts.clone()
    };
    let (d_off, status) = Dataset::load_in_dirs(tmp.path(), &off, &dirs).unwrap();
    assert_eq!(status, CacheStatus::Disabled);
    assert_eq!(d_off, fresh);
}

#[test]
fn default_cache_folder_is_next_to_writable_data() {
    let tmp = ogb_dir(&[]);
    let dirs: Vec<PathBuf> = cache::cache_dirs(tmp.path(), None, &|_| None)
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert_eq!(dirs, vec![tmp.path().join("espalier-cache")]);
    let (_, status) = Dataset::load_in_dirs(tmp.path(), &LoadOptions::default(), &dirs).unwrap();
    assert!(
        matches!(&status, CacheStatus::Written { path, .. } if path.starts_with(tmp.path().join("espalier-cache"))),
        "{status:?}"
    );
    // Not writable anywhere: the load still succeeds.
    let file = tmp.path().join("raw/edge.csv.gz");
    let (_, status) = Dataset::load_in_dirs(
        tmp.path(),
        &LoadOptions {
            seed: 9,
            ..LoadOptions::default()
        },
        &[file.join("sub")],
    )
    .unwrap();
    assert!(matches!(status, CacheStatus::NotWritten(_)), "{status:?}");
}

#[test]
fn ogb_files_are_listed_for_the_cache_key() {
    let tmp = ogb_dir(&[("raw/node-label.csv.gz", None)]);
    let files = ogb::OgbFiles::locate(tmp.path(), None).unwrap();
    let all = files.all();
    assert!(all
        .iter()
        .any(|(l, f)| l == "raw/node-label.csv.gz" && f.is_none()));
    assert!(all
        .iter()
        .any(|(l, f)| l == "split/s/test.csv.gz" && f.is_some()));
}

/// Small scales with a few thousand nodes for each preset.
fn small_specs() -> Vec<SynthSpec> {
    synth::PRESETS
        .iter()
        .map(|&p| SynthSpec {
            preset: p,
            scale: 3000.0 / p.nodes as f64,
            seed: 1,
        })
        .collect()
}

#[test]
fn synthetic_presets_have_their_counts() {
    for spec in small_specs() {
        let p = spec.preset;
        let d = synth::generate(&spec).unwrap();
        let n = (p.nodes as f64 * spec.scale).round() as usize;
        let m = (p.edges as f64 * spec.scale).round() as usize;
        assert_eq!((d.num_nodes(), d.num_edges()), (n, m), "{}", p.name);
        assert_eq!((d.feat_dim, d.num_classes), (p.feat_dim, p.classes));
        assert_eq!(d.features.len(), n * p.feat_dim);
        assert!(d.labels.iter().all(|&l| (l as usize) < p.classes));
        let frac = |k: usize| (k as f64 / n as f64 * 100.0).round();
        assert_eq!(
            (
                frac(d.split.train.len()),
                frac(d.split.valid.len()),
                frac(d.split.test.len())
            ),
            (10.0, 10.0, 20.0)
        );
        // No self-loops or duplicate edges.
        for v in 0..n as u32 {
            let mut row = d.graph.neighbors(v).to_vec();
            assert!(!row.contains(&v), "{}: self-loop at {v}", p.name);
            row.sort_unstable();
            row.dedup();
            assert_eq!(
                row.len(),
                d.graph.neighbors(v).len(),
                "{}: duplicate edge",
                p.name
            );
        }
        // Homophily as planted, over the nodes whose class is large enough to supply all
        // their in-edges (at these tiny scales hubs outnumber their class).
        let mut size = vec![0usize; p.classes];
        d.labels.iter().for_each(|&l| size[l as usize] += 1);
        let (mut same, mut total) = (0usize, 0usize);
        for v in 0..n as u32 {
            let (row, l) = (d.graph.neighbors(v), d.labels[v as usize]);
            if row.len() < size[l as usize] {
                same += row.iter().filter(|&&u| d.labels[u as usize] == l).count();
                total += row.len();
            }
        }
        let h = same as f64 / total as f64;
        let want = p.homophily + (1.0 - p.homophily) / p.classes as f64;
        println!(
            "{}: homophily {h:.3} over {total} of {m} edges, planted {want:.3}",
            p.name
        );
        assert!(total > m / 4, "{}: {total} of {m} edges checked", p.name);
        assert!(
            (h - want).abs() < 0.03,
            "{}: homophily {h}, planted {want}",
            p.name
        );
        // Power law: a heavy tail, the largest degree far above the mean. Equal weights:
        // every in-degree within 1 of the mean.
        let deg = d.graph.in_degrees();
        let max = *deg.iter().max().unwrap() as f64;
        if p.gamma.is_some() {
            assert!(
                max > 5.0 * m as f64 / n as f64,
                "{}: max in-degree {max}",
                p.name
            );
        } else {
            assert!(
                max <= (m as f64 / n as f64).ceil(),
                "{}: max in-degree {max}",
                p.name
            );
        }
    }
    let big = SynthSpec::parse("products-like,scale=0.0000001").unwrap();
    assert!(matches!(
        synth::generate(&big),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn generator_is_identical_for_1_and_2_threads() {
    let spec = SynthSpec::parse("arxiv-like,scale=0.05,seed=7").unwrap();
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| synth::generate(&spec).unwrap())
    };
    let (a, b) = (run(1), run(2));
    assert_eq!(a, b);
    let other = SynthSpec { seed: 8, ..spec };
    assert_ne!(synth::generate(&other).unwrap().graph, a.graph);
}

/// Leave-one-out nearest class-mean accuracy of `x` (rows of `dim`), class means from all
/// other nodes: how well the classes separate with these features.
fn nearest_mean_accuracy(x: &[f32], dim: usize, labels: &[u32], classes: usize) -> f64 {
    let mut sum = vec![0f64; classes * dim];
    let mut count = vec![0f64; classes];
    for (row, &l) in x.chunks(dim).zip(labels) {
        count[l as usize] += 1.0;
        for (m, &v) in sum[l as usize * dim..].iter_mut().zip(row) {
            *m += v as f64;
        }
    }
    let hits = x
        .chunks(dim)
        .zip(labels)
        .filter(|(row, &l)| {
            let dist = |c: usize| -> f64 {
                let own = c == l as usize;
                let k = count[c] - if own { 1.0 } else { 0.0 };
                if k < 1.0 {
                    return f64::INFINITY;
                }
                row.iter()
                    .zip(&sum[c * dim..(c + 1) * dim])
                    .map(|(&a, &s)| {
                        let m = (s - if own { a as f64 } else { 0.0 }) / k;
                        (a as f64 - m).powi(2)
                    })
                    .sum()
            };
            (0..classes).min_by(|&a, &b| dist(a).total_cmp(&dist(b))) == Some(l as usize)
        })
        .count();
    hits as f64 / labels.len() as f64
}

#[test]
fn neighbour_averaging_separates_classes_far_better() {
    for name in [
        "cora-like",
        "arxiv-like,scale=0.02",
        "products-like,scale=0.002",
    ] {
        let d = SynthSpec::parse(name).unwrap().generate().unwrap();
        let (n, f) = (d.num_nodes(), d.feat_dim);
        let g = d.graph.symmetrize();
        let mut agg = vec![0f32; n * f];
        for v in 0..n as u32 {
            let nb = g.neighbors(v);
            let out = &mut agg[v as usize * f..(v as usize + 1) * f];
            for &u in nb.iter().chain([v].iter()) {
                for (o, &x) in out.iter_mut().zip(d.feature_row(u)) {
                    *o += x / (nb.len() + 1) as f32;
                }
            }
        }
        let raw = nearest_mean_accuracy(&d.features, f, &d.labels, d.num_classes);
        let smooth = nearest_mean_accuracy(&agg, f, &d.labels, d.num_classes);
        println!("{name}: single node {raw:.3}, neighbourhood mean {smooth:.3}");
        assert!(
            raw > 2.0 / d.num_classes as f64,
            "{name}: features carry no signal ({raw})"
        );
        assert!(smooth > raw + 0.2, "{name}: {raw} -> {smooth}");
    }
}

#[test]
fn write_then_load_round_trips() {
    let mut d = SynthSpec::parse("cora-like,scale=0.3,seed=4")
        .unwrap()
        .generate()
        .unwrap();
    // Awkward values: unlabeled nodes, extreme and tiny floats, an empty test part.
    d.labels[3] = UNLABELED;
    d.features[0] = 1.0e-7;
    d.features[1] = -3.4e38;
    d.features[2] = 0.1 + 0.2;
    d.features[5] = -0.0;
    d.split.test.clear();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("copy");
    write_ogb(&d, &dir).unwrap();
    let back = Dataset::load(&dir, &no_cache()).unwrap();
    assert_eq!(back.graph, d.graph);
    assert_eq!(back.feat_dim, d.feat_dim);
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&back.features) == bits(&d.features), "features differ");
    assert_eq!(back.labels, d.labels);
    assert_eq!(back.num_classes, d.num_classes);
    assert_eq!(back.split, d.split);
    assert!(back.notes.is_empty(), "{:?}", back.notes);
    assert_eq!(back.name, "copy");
    // A CSR without edge ids is written in CSR order and reads back to the same rows.
    let mut sym = d.clone();
    sym.graph = d.graph.symmetrize();
    write_ogb(&sym, &dir).unwrap();
    let back = Dataset::load(&dir, &no_cache()).unwrap();
    assert_eq!(back.graph.indptr, sym.graph.indptr);
    assert_eq!(back.graph.indices, sym.graph.indices);
}

#[test]
fn impossible_sizes_are_errors_not_aborts() {
    // About 2 TB of features: more than any machine that runs the tests has available
    // (memory admission compares with what the system can give, whatever its overcommit
    // mode; where no limit can be read, a reservation of the address space fails).
    let spec = SynthSpec::parse("papers-like,scale=35").unwrap();
    match synth::generate(&spec) {
        Err(Error::InvalidArgument(m)) => assert!(
            m.contains("synthetic papers-like")
                && (m.contains("more than the") || m.contains("cannot allocate")),
            "{m}"
        ),
        other => panic!(
            "expected an allocation error, got {:?}",
            other.map(|d| d.num_nodes())
        ),
    }
}

// ---- What a user trusts: labels, data checks, cache identity, named and synthetic ----

#[test]
fn a_label_near_u32_max_is_an_error_naming_file_and_line_not_an_abort() {
    let l = "raw/node-label.csv.gz";
    let tmp = ogb_dir(&[(l, Some("0\n1\n4294967294\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 3, "limit");
}

#[test]
fn a_label_implying_more_classes_than_nodes_is_an_error() {
    let l = "raw/node-label.csv.gz";
    let tmp = ogb_dir(&[(l, Some("0\n4000000\n1\n2\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), l, 2, "limit");
    let tmp = ogb_dir(&[(l, Some("0\n1\n7\n2\n"))]);
    assert_parse(
        Dataset::load(tmp.path(), &no_cache()),
        l,
        3,
        "more than the 4 nodes",
    );
}

#[test]
fn a_stray_label_far_above_the_others_is_reported() {
    // 64 nodes in a ring, labels 0..3 except one 40.
    let n = 64;
    let edges: String = (0..n).map(|i| format!("{i},{}\n", (i + 1) % n)).collect();
    let labels: String = (0..n)
        .map(|i| {
            if i == 9 {
                "40\n".to_string()
            } else {
                format!("{}\n", i % 4)
            }
        })
        .collect();
    let nodes = format!("{n}\n");
    let tmp = ogb_dir(&[
        ("raw/edge.csv.gz", Some(&edges)),
        ("raw/num-node-list.csv.gz", Some(&nodes)),
        ("raw/num-edge-list.csv.gz", None),
        ("raw/node-feat.csv.gz", None),
        ("raw/node-label.csv.gz", Some(&labels)),
        ("split/s/valid.csv.gz", Some("5\n")),
        ("split/s/test.csv.gz", Some("6\n")),
    ]);
    let d = Dataset::load(tmp.path(), &no_cache()).unwrap();
    assert_eq!(d.num_classes, 41);
    let note = d
        .notes
        .iter()
        .find(|n| n.contains("far above"))
        .unwrap_or_else(|| panic!("no note about label 40: {:?}", d.notes));
    assert!(note.contains("raw/node-label.csv.gz:10"), "{note}");
}

#[test]
fn overlapping_split_parts_are_an_error_naming_both_files() {
    let t = "split/s/test.csv.gz";
    let tmp = ogb_dir(&[(t, Some("3\n1\n"))]);
    match Dataset::load(tmp.path(), &no_cache()) {
        Err(Error::Parse { path, line, msg }) => {
            assert!(path.ends_with(t), "{path:?}");
            assert_eq!(line, 2);
            assert!(
                msg.contains("train.csv.gz") && msg.contains("overlap"),
                "{msg}"
            );
        }
        other => panic!("expected an overlap error, got {other:?}"),
    }
    let v = "split/s/valid.csv.gz";
    let tmp = ogb_dir(&[(v, Some("0\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), v, 1, "overlap");
}

#[test]
fn a_duplicate_split_id_names_file_and_line() {
    let tr = "split/s/train.csv.gz";
    let tmp = ogb_dir(&[(tr, Some("0\n1\n0\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), tr, 3, "twice");
}

#[test]
fn an_empty_edge_file_is_an_error_saying_a_gnn_needs_edges() {
    let e = "raw/edge.csv.gz";
    let tmp = ogb_dir(&[(e, Some("")), ("raw/num-edge-list.csv.gz", None)]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), e, 0, "no edges");
    let err = Dataset::load(tmp.path(), &no_cache())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot train a GNN"), "{err}");
}

#[test]
fn zero_nodes_is_a_dataset_error() {
    let n = "raw/num-node-list.csv.gz";
    let tmp = ogb_dir(&[(n, Some("0\n"))]);
    assert_parse(Dataset::load(tmp.path(), &no_cache()), n, 1, "empty");
}

#[test]
fn whole_file_errors_show_no_line_number() {
    let e = "raw/edge.csv.gz";
    let tmp = ogb_dir(&[]);
    std::fs::write(tmp.path().join(e), b"0,1\n").unwrap();
    let err = Dataset::load(tmp.path(), &no_cache())
        .unwrap_err()
        .to_string();
    assert!(err.contains("edge.csv.gz: not a gzip file"), "{err}");
    assert!(!err.contains(":0:"), "{err}");
}

#[test]
fn a_file_is_read_as_an_edge_list_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("feats.csv");
    std::fs::write(&p, "0.5,0.25,1\n").unwrap();
    let err = Dataset::load(&p, &no_cache()).unwrap_err().to_string();
    assert!(
        err.contains("feats.csv:1:") && err.contains("edge list"),
        "{err}"
    );
    // A folder without raw/ is neither.
    let err = Dataset::load(tmp.path(), &no_cache())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no raw/"), "{err}");
}

#[test]
fn cache_entry_is_the_same_for_relative_and_absolute_paths_and_holds_no_absolute_path() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = root.path().join("ds");
    let src = ogb_dir(&[("raw/node-feat.csv.gz", None)]);
    for rel in [
        "raw/edge.csv.gz",
        "raw/num-node-list.csv.gz",
        "raw/num-edge-list.csv.gz",
        "raw/node-label.csv.gz",
        "split/s/train.csv.gz",
        "split/s/valid.csv.gz",
        "split/s/test.csv.gz",
    ] {
        std::fs::create_dir_all(data.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(src.path().join(rel), data.join(rel)).unwrap();
    }
    let cache_dir = root.path().join("c");
    let dirs = vec![cache_dir.clone()];
    let (_, status) = Dataset::load_in_dirs(&data, &LoadOptions::default(), &dirs).unwrap();
    let CacheStatus::Written { path, .. } = status else {
        panic!("{status:?}")
    };
    // The same folder reached through a path with `..` reads the same entry.
    let detour = data.join("raw").join("..");
    let (_, status) = Dataset::load_in_dirs(&detour, &LoadOptions::default(), &dirs).unwrap();
    assert_eq!(status, CacheStatus::Hit(path.clone()));
    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains(&*root.path().to_string_lossy()),
        "absolute path inside"
    );
    // Seeds and widths share the entry (features are synthesized after the read).
    for seed in 1..4 {
        let opts = LoadOptions {
            seed,
            feat_dim: Some(8 * seed as usize),
            ..LoadOptions::default()
        };
        let (d, status) = Dataset::load_in_dirs(&data, &opts, &dirs).unwrap();
        assert_eq!(status, CacheStatus::Hit(path.clone()));
        assert_eq!(d.feat_dim, 8 * seed as usize);
    }
    assert_eq!(cache::list(&cache_dir).unwrap().len(), 1);
}

#[test]
fn stale_temp_files_in_the_cache_are_cleaned_after_an_hour() {
    let tmp = ogb_dir(&[]);
    let cache_dir = tempfile::tempdir().unwrap();
    let old = cache_dir.path().join(".x.espc.tmp.123.0");
    let fresh = cache_dir.path().join(".y.espc.tmp.123.1");
    std::fs::write(&old, b"half").unwrap();
    std::fs::write(&fresh, b"half").unwrap();
    let f = std::fs::File::options().write(true).open(&old).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(7200))
        .unwrap();
    drop(f);
    let dirs = vec![cache_dir.path().to_path_buf()];
    Dataset::load_in_dirs(tmp.path(), &LoadOptions::default(), &dirs).unwrap();
    assert!(!old.exists(), "an old temp file stays");
    assert!(
        fresh.exists(),
        "a recent temp file (a live writer) was removed"
    );
}

#[test]
fn cache_messages_say_written_rebuilt_and_why() {
    let tmp = ogb_dir(&[]);
    let cache_dir = tempfile::tempdir().unwrap();
    let dirs = vec![cache_dir.path().to_path_buf()];
    let (_, s) = Dataset::load_in_dirs(tmp.path(), &LoadOptions::default(), &dirs).unwrap();
    assert!(s.message().unwrap().contains("wrote"), "{s:?}");
    put(tmp.path(), "raw/edge.csv.gz", "0,1\n1,2\n2,3\n3,0\n0,3\n");
    let (_, s) = Dataset::load_in_dirs(tmp.path(), &LoadOptions::default(), &dirs).unwrap();
    let m = s.message().unwrap();
    assert!(
        m.contains("rebuilt") && m.contains("raw/edge.csv.gz changed"),
        "{m}"
    );
}

#[test]
fn synthetic_datasets_honour_seed_feat_dim_and_classes() {
    let base = espalier::graph::load("synthetic:cora-like,scale=0.2", &no_cache()).unwrap();
    let opts = LoadOptions {
        seed: 3,
        feat_dim: Some(16),
        classes: Some(4),
        ..no_cache()
    };
    let d = espalier::graph::load("synthetic:cora-like,scale=0.2", &opts).unwrap();
    assert_eq!((d.feat_dim, d.num_classes), (16, 4));
    assert_eq!(d.name, "cora-like,scale=0.2,seed=3,feat_dim=16,classes=4");
    // The spec's own seed wins over --seed; otherwise --seed changes the graph.
    let own = espalier::graph::load("synthetic:cora-like,scale=0.2,seed=0", &opts).unwrap();
    let zero = LoadOptions {
        seed: 0,
        ..opts.clone()
    };
    let seed0 = espalier::graph::load("synthetic:cora-like,scale=0.2", &zero).unwrap();
    assert!(own.graph == seed0.graph, "the spec's seed=0 was overridden");
    assert!(d.graph != seed0.graph, "--seed ignored");
    assert_eq!(base.feat_dim, 1433, "the preset's width is the default");
}

#[test]
fn named_datasets_resolve_under_the_data_root_or_say_where_to_put_them() {
    let root = tempfile::tempdir().unwrap();
    let opts = LoadOptions {
        data_root: Some(root.path().to_path_buf()),
        ..no_cache()
    };
    let err = espalier::graph::load("ogbn-arxiv", &opts)
        .unwrap_err()
        .to_string();
    let want = root
        .path()
        .join("ogbn_arxiv")
        .join("raw")
        .join("edge.csv.gz");
    assert!(err.contains(&*want.to_string_lossy()), "{err}");
    assert!(
        err.contains("node-label.csv.gz") && err.contains("split/"),
        "{err}"
    );
    // Put a dataset there: it loads by name.
    let src = ogb_dir(&[]);
    let dst = root.path().join("ogbn_arxiv");
    for rel in [
        "raw/edge.csv.gz",
        "raw/num-node-list.csv.gz",
        "split/s/train.csv.gz",
    ] {
        std::fs::create_dir_all(dst.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(src.path().join(rel), dst.join(rel)).unwrap();
    }
    let d = espalier::graph::load("ogbn-arxiv", &opts).unwrap();
    assert_eq!((d.name.as_str(), d.num_nodes()), ("ogbn_arxiv", 4));
    // Unknown names list the known ones.
    let err = espalier::graph::load("nosuch", &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("ogbn-products"), "{err}");
}

/// Writes a small synthetic dataset in the OGB layout and returns its folder.
fn written_synthetic(tmp: &Path, spec: &str) -> (Dataset, PathBuf) {
    let d = SynthSpec::parse(spec).unwrap().generate().unwrap();
    let dir = tmp.join("data");
    write_ogb(&d, &dir).unwrap();
    (d, dir)
}

#[test]
fn a_cache_hit_is_memory_mapped_and_equals_the_parsed_dataset_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (generated, dir) = written_synthetic(tmp.path(), "cora-like,scale=0.5,seed=2");
    let dirs = vec![tmp.path().join("cache")];
    let opts = LoadOptions::default();
    let (parsed, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }), "{status:?}");
    assert!(!parsed.graph.indices.is_mapped());
    let (mapped, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Hit(_)), "{status:?}");
    let g = &mapped.graph;
    assert!(g.indptr.is_mapped() && g.indices.is_mapped());
    assert!(g.edge_ids.as_ref().is_some_and(|ids| ids.is_mapped()));
    assert!(mapped.features.is_mapped() && mapped.labels.is_mapped());
    assert_eq!(mapped, parsed);
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&mapped.features) == bits(&generated.features));
    assert_eq!(mapped.graph, generated.graph);
    assert_eq!(mapped.labels, generated.labels);
    assert_eq!(mapped.split, generated.split);
    // Writing to a mapped array copies it; the entry on disk is untouched.
    let mut copy = mapped.clone();
    copy.features[0] += 1.0;
    assert!(!copy.features.is_mapped() && copy.features[0] != mapped.features[0]);
    let (again, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Hit(_)), "{status:?}");
    assert_eq!(again, parsed);
}

#[test]
fn an_entry_of_the_previous_format_version_is_rebuilt_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = written_synthetic(tmp.path(), "cora-like,scale=0.2");
    let dirs = vec![tmp.path().join("cache")];
    let opts = LoadOptions::default();
    let (parsed, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    let CacheStatus::Written { path, .. } = status else {
        panic!("expected a written entry, got {status:?}")
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let (again, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    match &status {
        CacheStatus::Rewritten { reason, .. } => {
            assert!(reason.contains("another version (format 3"), "{reason}")
        }
        other => panic!("expected a rebuilt entry, got {other:?}"),
    }
    assert!(status.message().unwrap().contains("rebuilt"));
    assert_eq!(again, parsed);
}

#[test]
fn a_cache_entry_with_an_out_of_range_id_and_a_matching_checksum_is_rejected() {
    // Corruption that a checksum would catch is tested above; here the checksum is made to
    // match, so only the reader's invariant checks stand between the entry and the sampler.
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = written_synthetic(tmp.path(), "cora-like,scale=0.2");
    let dirs = vec![tmp.path().join("cache")];
    let opts = LoadOptions::default();
    let (parsed, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    let CacheStatus::Written { path, .. } = status else {
        panic!("expected a written entry, got {status:?}")
    };
    let n = parsed.num_nodes() as u64;
    let mut bytes = std::fs::read(&path).unwrap();
    let meta_len = u64::from_le_bytes(bytes[64..72].try_into().unwrap());
    let indices_at = (80 + meta_len).next_multiple_of(64) + (n + 1) * 8;
    let indices_at = indices_at.next_multiple_of(64) as usize;
    bytes[indices_at..indices_at + 4].copy_from_slice(&(n as u32).to_le_bytes());
    let sum = cache::entry_checksum(&bytes);
    bytes[72..80].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let (again, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    match &status {
        CacheStatus::Rewritten { reason, .. } => {
            assert!(reason.contains("node id out of range"), "{reason}")
        }
        other => panic!("expected a rebuilt entry, got {other:?}"),
    }
    assert_eq!(again, parsed);
}

/// The decompressed text of every file under `dir`, by relative path.
fn texts_under(dir: &Path) -> Vec<(String, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    for sub in ["raw", "split/bench"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(&p).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            out.push((rel, text));
        }
    }
    out
}

#[test]
fn streaming_gen_writes_the_same_files_as_the_in_memory_generator() {
    let tmp = tempfile::tempdir().unwrap();
    // Several node and feature chunks, a preset with hubs and one without.
    for spec in ["arxiv-like,scale=0.06,seed=5", "road-like,scale=0.005"] {
        let spec = SynthSpec::parse(spec).unwrap();
        let streamed = tmp.path().join("streamed");
        let held = tmp.path().join("held");
        let mut files = Vec::new();
        synth::generate_to_ogb(&spec, &streamed, &mut |f, _, _| files.push(f.to_string())).unwrap();
        let d = spec.generate().unwrap();
        write_ogb(&d, &held).unwrap();
        assert_eq!(files.len(), 8, "{files:?}");
        let (a, b) = (texts_under(&streamed), texts_under(&held));
        assert_eq!(a.len(), 8);
        for ((fa, ta), (fb, tb)) in a.iter().zip(&b) {
            assert_eq!(fa, fb);
            assert!(ta == tb, "{}: {fa} differs", spec.name());
        }
        let back = Dataset::load(&streamed, &no_cache()).unwrap();
        assert_eq!(back.graph, d.graph);
        assert_eq!(back.labels, d.labels);
        assert_eq!(back.split, d.split);
        std::fs::remove_dir_all(&streamed).unwrap();
        std::fs::remove_dir_all(&held).unwrap();
    }
}

#[test]
fn the_symmetrized_graph_is_cached_beside_the_entry_mapped_and_rebuilt_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = written_synthetic(tmp.path(), "cora-like,scale=0.3,seed=1");
    let cache_dir = tmp.path().join("cache");
    let dirs = vec![cache_dir.clone()];
    let opts = LoadOptions::default();
    let (d, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    let entry = status.entry().unwrap().to_path_buf();
    let (g, line) = cache::symmetrized(&d.graph, &entry).unwrap();
    assert!(
        line.contains("wrote") && line.contains(".sym.espc"),
        "{line}"
    );
    assert!(g.indices.is_mapped());
    assert_eq!(g, d.graph.symmetrize());
    let (again, line) = cache::symmetrized(&d.graph, &entry).unwrap();
    assert!(line.contains("read"), "{line}");
    assert_eq!(again, g);
    let listed = cache::list(&cache_dir).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|e| e.dataset.ends_with("(symmetrized)")));
    // Another dataset in the same folder rebuilds the entry, and so the symmetrized graph.
    let other = SynthSpec::parse("cora-like,scale=0.3,seed=2")
        .unwrap()
        .generate()
        .unwrap();
    write_ogb(&other, &dir).unwrap();
    let (d2, status) = Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(
        matches!(status, CacheStatus::Rewritten { .. }),
        "{status:?}"
    );
    assert_eq!(status.entry(), Some(entry.as_path()));
    let (g2, line) = cache::symmetrized(&d2.graph, &entry).unwrap();
    assert!(line.contains("rebuilt") && line.contains("stale"), "{line}");
    assert_eq!(g2, other.graph.symmetrize());
    assert_ne!(g2, g);
}
