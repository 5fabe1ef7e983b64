//! Helpers of the dataset loader tests (`loaders_*.rs`): gzipped files, a small valid OGB
//! folder, the parse error a bad file must give, the repository's datasets.
#![allow(dead_code)] // each loader test binary uses part of it

use std::io::Write;
use std::path::{Path, PathBuf};

use espalier::graph::io::write_ogb;
use espalier::graph::synth::SynthSpec;
use espalier::graph::{Dataset, LoadOptions};
use espalier::Error;

pub fn gz_bytes(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

pub fn put(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, gz_bytes(text)).unwrap();
}

/// A valid 4-node dataset; `tweak` overrides files (None removes one).
pub fn ogb_dir(tweak: &[(&str, Option<&str>)]) -> tempfile::TempDir {
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

pub fn no_cache() -> LoadOptions {
    LoadOptions {
        cache: false,
        ..LoadOptions::default()
    }
}

/// Asserts a parse error in the file ending with `file`, at `line`, whose message holds
/// `word`.
pub fn assert_parse(r: espalier::Result<Dataset>, file: &str, line: u64, word: &str) {
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

pub fn shared(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data")).join(name);
    if p.join("raw").is_dir() {
        Some(p)
    } else {
        println!("skipped: {} not found", p.display());
        None
    }
}

/// Writes a small synthetic dataset in the OGB layout and returns its folder.
pub fn written_synthetic(tmp: &Path, spec: &str) -> (Dataset, PathBuf) {
    let d = SynthSpec::parse(spec).unwrap().generate().unwrap();
    let dir = tmp.join("data");
    write_ogb(&d, &dir).unwrap();
    (d, dir)
}
