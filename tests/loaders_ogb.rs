//! Dataset loaders: the OGB layout and edge lists. Every bad input must come back as a
//! typed error naming the file and line (or the file, for whole-file errors).

use espalier::graph::dataset::UNLABELED;
use espalier::graph::synth::{self, SynthSpec};
use espalier::graph::{Dataset, LoadOptions};
use espalier::Error;

#[path = "common/data.rs"]
mod data;

use data::{assert_parse, gz_bytes, no_cache, ogb_dir};

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
