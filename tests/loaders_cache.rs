//! Dataset loaders: the binary cache (hits, stale and corrupt entries, where it lives, its
//! messages, memory mapping) and where named datasets are found.

use std::path::PathBuf;

use espalier::graph::io::cache::{self, CacheStatus};
use espalier::graph::io::{ogb, write_ogb};
use espalier::graph::synth::SynthSpec;
use espalier::graph::{Dataset, LoadOptions};

#[path = "common/data.rs"]
mod data;

use data::{no_cache, ogb_dir, put, shared, written_synthetic};

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
