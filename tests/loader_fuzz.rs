//! Random corruptions of every file a loader reads (truncation, flipped bytes, garbage
//! lines, huge numbers, lost lines), and of a cache entry: never a panic or an abort; every
//! error names a file (the corrupted one, where no other file is the one at fault); a
//! corrupt cache entry is rebuilt, never trusted.

use std::io::Write;
use std::path::Path;

use espalier::graph::io::CacheStatus;
use espalier::graph::{Dataset, LoadOptions};
use proptest::prelude::*;

/// The valid dataset every case starts from.
const FILES: [(&str, &str); 8] = [
    ("raw/edge.csv.gz", "0,1\n1,2\n2,3\n3,0\n0,2\n"),
    ("raw/num-node-list.csv.gz", "4\n"),
    ("raw/num-edge-list.csv.gz", "5\n"),
    ("raw/node-feat.csv.gz", "0.5,1\n1,2\n-1,0\n3,4e-3\n"),
    ("raw/node-label.csv.gz", "0\n1\n\n2\n"),
    ("split/s/train.csv.gz", "0\n1\n"),
    ("split/s/valid.csv.gz", "2\n"),
    ("split/s/test.csv.gz", "3\n"),
];

#[derive(Clone, Debug)]
enum Corruption {
    /// Keep this fraction of the bytes (of the gzip stream when `compressed`).
    Truncate { keep: f64, compressed: bool },
    /// XOR one byte with a non-zero mask.
    Flip {
        at: usize,
        mask: u8,
        compressed: bool,
    },
    /// Insert a line of printable garbage.
    Garbage { at: usize, line: String },
    /// Replace a line with a huge or extreme number.
    Huge { at: usize, which: usize },
    /// Remove a line.
    Drop { at: usize },
}

const HUGE: [&str; 6] = [
    "4294967294",
    "4294967295",
    "18446744073709551615",
    "99999999999999999999999999",
    "1e308",
    "4000000",
];

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        (0.0..1.0f64, any::<bool>())
            .prop_map(|(keep, compressed)| Corruption::Truncate { keep, compressed }),
        (any::<usize>(), 1u8.., any::<bool>()).prop_map(|(at, mask, compressed)| {
            Corruption::Flip {
                at,
                mask,
                compressed,
            }
        }),
        (any::<usize>(), "[ -~]{0,16}").prop_map(|(at, line)| Corruption::Garbage { at, line }),
        (any::<usize>(), 0..HUGE.len()).prop_map(|(at, which)| Corruption::Huge { at, which }),
        any::<usize>().prop_map(|at| Corruption::Drop { at }),
    ]
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// The corrupted file content (gzip-compressed when `gzip`).
fn corrupt(text: &str, c: &Corruption, gzip: bool) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let pick = |at: usize, len: usize| if len == 0 { 0 } else { at % len };
    let bytes_layer = |mut b: Vec<u8>| -> Vec<u8> {
        match c {
            Corruption::Truncate { keep, .. } => {
                let n = (b.len() as f64 * keep) as usize;
                b.truncate(n);
            }
            Corruption::Flip { at, mask, .. } if !b.is_empty() => {
                let i = at % b.len();
                b[i] ^= mask;
            }
            _ => {}
        }
        b
    };
    let compressed = matches!(
        c,
        Corruption::Truncate {
            compressed: true,
            ..
        } | Corruption::Flip {
            compressed: true,
            ..
        }
    );
    match c {
        Corruption::Garbage { at, line } => {
            let i = pick(*at, lines.len() + 1);
            lines.insert(i, line.clone());
        }
        Corruption::Huge { at, which } => {
            let i = pick(*at, lines.len());
            if lines.is_empty() {
                lines.push(String::new());
            }
            // Keep the other columns: the number replaces the first field.
            let rest = lines[i].split_once(',').map(|(_, r)| format!(",{r}"));
            lines[i] = format!("{}{}", HUGE[*which], rest.unwrap_or_default());
        }
        Corruption::Drop { at } if !lines.is_empty() => {
            let i = pick(*at, lines.len());
            lines.remove(i);
        }
        _ => {}
    }
    let mut plain = lines.join("\n").into_bytes();
    if !plain.is_empty() {
        plain.push(b'\n');
    }
    if !gzip {
        return bytes_layer(plain);
    }
    if compressed {
        bytes_layer(gz(&plain))
    } else {
        gz(&bytes_layer(plain))
    }
}

fn write_dataset(dir: &Path, corrupted: Option<(&str, &[u8])>) {
    for (rel, text) in FILES {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        match corrupted {
            Some((r, bytes)) if r == rel => std::fs::write(&p, bytes).unwrap(),
            _ => std::fs::write(&p, gz(text.as_bytes())).unwrap(),
        }
    }
}

fn no_cache() -> LoadOptions {
    LoadOptions {
        cache: false,
        ..LoadOptions::default()
    }
}

/// Loads an OGB folder with `rel` corrupted; an error must name `rel` (or, for the node
/// count, whichever file then disagrees with it).
fn check_ogb(rel: &str, c: &Corruption) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let text = FILES.iter().find(|(r, _)| *r == rel).unwrap().1;
    let bytes = corrupt(text, c, true);
    write_dataset(tmp.path(), Some((rel, &bytes)));
    let r = std::panic::catch_unwind(|| Dataset::load(tmp.path(), &no_cache()));
    let Ok(r) = r else {
        return Err(TestCaseError::fail(format!("{rel}: panicked on {c:?}")));
    };
    if let Err(e) = r {
        let msg = e.to_string();
        let file = Path::new(rel).file_name().unwrap().to_string_lossy();
        let named = if rel.ends_with("num-node-list.csv.gz") {
            msg.contains(".csv.gz")
        } else {
            msg.contains(&*file)
        };
        prop_assert!(named, "{rel} with {c:?}: error does not name it: {msg}");
    }
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn corrupt_edge_file(c in corruption()) { check_ogb("raw/edge.csv.gz", &c)?; }

    #[test]
    fn corrupt_num_node_list(c in corruption()) { check_ogb("raw/num-node-list.csv.gz", &c)?; }

    #[test]
    fn corrupt_num_edge_list(c in corruption()) { check_ogb("raw/num-edge-list.csv.gz", &c)?; }

    #[test]
    fn corrupt_node_features(c in corruption()) { check_ogb("raw/node-feat.csv.gz", &c)?; }

    #[test]
    fn corrupt_node_labels(c in corruption()) { check_ogb("raw/node-label.csv.gz", &c)?; }

    #[test]
    fn corrupt_split_files(c in corruption(), part in 0usize..3) {
        let rel = ["split/s/train.csv.gz", "split/s/valid.csv.gz", "split/s/test.csv.gz"][part];
        check_ogb(rel, &c)?;
    }

    #[test]
    fn corrupt_plain_edge_list(c in corruption()) {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("graph.txt");
        std::fs::write(&p, corrupt("0 1\n1 2\n# c\n2 3\n3 0\n", &c, false)).unwrap();
        let r = std::panic::catch_unwind(|| Dataset::load(&p, &no_cache()));
        prop_assert!(r.is_ok(), "panicked on {:?}", c);
        if let Ok(Err(e)) = r {
            prop_assert!(e.to_string().contains("graph.txt"), "{c:?}: {e}");
        }
    }

    #[test]
    fn corrupt_cache_entry_is_rebuilt(c in corruption()) {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("ds");
        write_dataset(&data, None);
        let dirs = vec![tmp.path().join("cache")];
        let opts = LoadOptions::default();
        let (fresh, status) = Dataset::load_in_dirs(&data, &opts, &dirs).unwrap();
        let CacheStatus::Written { path, .. } = status else {
            return Err(TestCaseError::fail(format!("{status:?}")));
        };
        let bytes = std::fs::read(&path).unwrap();
        // Bytes-level corruption of the binary entry (text corruptions read it as lines).
        let mut bad = bytes.clone();
        match &c {
            Corruption::Truncate { keep, .. } => bad.truncate((bad.len() as f64 * keep) as usize),
            Corruption::Flip { at, mask, .. } => { let i = at % bad.len(); bad[i] ^= mask; }
            Corruption::Garbage { at, line } => {
                let i = at % bad.len();
                bad.splice(i..i, line.bytes());
            }
            Corruption::Huge { at, which } => {
                // A huge count in one of the header's size fields.
                let field = 16 + 8 * (at % 7);
                let v = HUGE[*which].parse::<f64>().unwrap_or(1e30) as u64;
                bad[field..field + 8].copy_from_slice(&v.to_le_bytes());
            }
            Corruption::Drop { at } => { let i = at % bad.len(); bad.remove(i); }
        }
        std::fs::write(&path, &bad).unwrap();
        let r = std::panic::catch_unwind(|| Dataset::load_in_dirs(&data, &opts, &dirs));
        prop_assert!(r.is_ok(), "panicked on {:?}", c);
        let (again, status) = r.unwrap().unwrap();
        prop_assert!(again == fresh, "{c:?}: a corrupt entry was trusted");
        if bad != bytes {
            prop_assert!(matches!(status, CacheStatus::Rewritten { .. }), "{c:?}: {status:?}");
        }
    }
}
