//! Times one full batch's partition into 8 micro-batches, then the micro-batches' block
//! sizes and their blocks sliced one after the other, with nothing else running (in
//! `espalier partition` without `--no-run` slicing overlaps compute). Prints a hash of
//! each partition, so two builds can be checked to cut alike. Seeds: the training split;
//! fanouts 25,10 (the CLI's default).
//!
//! ```sh
//! cargo run --release --example partition_profile -- synthetic:products-like,scale=1 betty,buffalo,grem
//! ```
use std::sync::Arc;
use std::time::Instant;

use espalier::graph::{self, Block, LoadOptions, Slicer};
use espalier::partition::{self, Batch};
use espalier::Result;

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let spec = &args[1];
    let names: Vec<&str> = args[2].split(',').collect();
    let k = 8;
    let t = Instant::now();
    let ds = graph::load(
        spec,
        &LoadOptions {
            cache: false,
            ..LoadOptions::default()
        },
    )?;
    let g = ds.graph.symmetrize();
    eprintln!("load {:.2}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let blocks: Vec<Arc<Block>> = graph::sample_blocks(&g, &ds.split.train, &[25, 10], 0)?
        .into_iter()
        .map(Arc::new)
        .collect();
    eprintln!("sample {:.2}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let slicer = Slicer::new(&blocks)?;
    eprintln!("slicer {:.2}", t.elapsed().as_secs_f64());
    let seeds = blocks.last().unwrap().dst_nodes().to_vec();
    for name in names {
        let batch = Batch {
            seeds: &seeds,
            slicer: &slicer,
            graph: &g,
            seed: 0,
            epoch: 0,
            estimator: None,
        };
        let mut p = partition::by_name(name)?;
        let t = Instant::now();
        let parts = partition::partition(p.as_mut(), &batch, k)?;
        let mut h = 0u64;
        for p in &parts {
            for &v in p {
                h = espalier::rng::mix64(h ^ v as u64);
            }
            h = espalier::rng::mix64(h ^ 0xfeed);
        }
        eprintln!(
            "{name} partition {:.3} hash {h:016x}",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let mut inputs = 0;
        for part in &parts {
            inputs += slicer.sizes(part)?[0].num_src;
        }
        eprintln!(
            "{name} sizes x{k} {:.3} inputs {inputs}",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let mut inputs2 = 0;
        for part in &parts {
            inputs2 += slicer.slice(part)?[0].num_src;
        }
        eprintln!(
            "{name} slice x{k} {:.3} inputs {inputs2}",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
