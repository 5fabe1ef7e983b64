//! Dataset loaders: the synthetic generator (presets, seeds, threads, class separation,
//! streaming) and the OGB writer's round trip.

use std::path::{Path, PathBuf};

use espalier::graph::dataset::UNLABELED;
use espalier::graph::io::write_ogb;
use espalier::graph::synth::{self, SynthSpec};
use espalier::graph::{Dataset, LoadOptions};
use espalier::Error;

#[path = "common/data.rs"]
mod data;

use data::no_cache;

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
