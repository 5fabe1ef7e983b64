//! Times the synthetic generator, the OGB writer, a first load (text parse + cache write)
//! and a cached re-load.
//!
//! ```sh
//! cargo run --release --example gen_time -- products-like            # generate only
//! cargo run --release --example gen_time -- products-like,scale=0.1 OUT_DIR
//! ```
//!
//! With an output folder the graph is written there in OGB layout, loaded back (which
//! writes the binary cache to `OUT/espalier-cache/`), and loaded again from the cache; the
//! loaded graph is checked against the generated one.

use std::time::Instant;

use espalier::graph::io::{cache, write_ogb};
use espalier::graph::synth::SynthSpec;
use espalier::graph::{Dataset, LoadOptions};

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> espalier::Result<()> {
    let mut args = std::env::args().skip(1);
    let spec: SynthSpec = args.next().as_deref().unwrap_or("products-like").parse()?;
    let out = args.next();
    println!(
        "{} on {} threads: {} nodes, {} edges, {} features",
        spec.name(),
        rayon::current_num_threads(),
        spec.num_nodes(),
        spec.num_edges(),
        spec.preset.feat_dim
    );

    let t = Instant::now();
    let d = spec.generate()?;
    println!("generate: {:.2} s", t.elapsed().as_secs_f64());

    let mut same = 0usize;
    for v in 0..d.num_nodes() as u32 {
        let l = d.labels[v as usize];
        same += d
            .graph
            .neighbors(v)
            .iter()
            .filter(|&&u| d.labels[u as usize] == l)
            .count();
    }
    let deg = d.graph.in_degrees();
    println!(
        "edge homophily {:.3}, max in-degree {}, max out-degree {}",
        same as f64 / d.num_edges() as f64,
        deg.iter().max().unwrap_or(&0),
        d.graph.out_degrees().iter().max().unwrap_or(&0)
    );

    let Some(out) = out else { return Ok(()) };
    let t = Instant::now();
    write_ogb(&d, &out)?;
    println!("write_ogb: {:.2} s", t.elapsed().as_secs_f64());
    let (graph, features, labels) = (d.graph.clone(), d.features.clone(), d.labels.clone());
    drop(d);

    let opts = LoadOptions::default();
    let dirs: Vec<_> = cache::cache_dirs(out.as_ref(), None, &|k| std::env::var_os(k))
        .into_iter()
        .map(|d| d.path)
        .collect();
    for run in ["first load", "re-load"] {
        let t = Instant::now();
        let (back, status) = Dataset::load_in_dirs(&out, &opts, &dirs)?;
        println!("{run}: {:.2} s ({status:?})", t.elapsed().as_secs_f64());
        assert!(back.graph == graph && back.features == features && back.labels == labels);
    }
    Ok(())
}
