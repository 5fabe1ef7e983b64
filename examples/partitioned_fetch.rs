//! Simulates training on a graph partitioned over N machines (issue 20 item 5,
//! `docs/DISTRIBUTED.md`): each machine holds one GREM or METIS part of the graph with its
//! nodes' features and trains the training seeds it owns; per epoch (one full batch per
//! machine) it fetches the feature rows of the sampled input nodes that other machines own.
//! Prints one markdown row per N: edge cut, remote rows, bytes and network seconds per
//! epoch at 25 and 100 Gbit/s (the busiest machine's link, f32 features, no overlap).
//!
//! ```sh
//! cargo run --release --example partitioned_fetch -- \
//!     --data synthetic:products-like --parts 2,4,8,16 --fanouts 10,25
//! ```

use std::time::Instant;

use clap::Parser;
use espalier::dist::sim::remote_inputs;
use espalier::graph::{self, LoadOptions};
use espalier::partition::grem::{grem_partition, GremOptions};
use espalier::partition::kway::{edge_cut, metis_graph_partition, undirected_edges};
use espalier::Result;

#[derive(Parser)]
struct Args {
    /// Dataset spec (a folder, an edge list or `synthetic:PRESET[,scale=X]`).
    #[arg(long)]
    data: String,
    /// Machine counts.
    #[arg(long, default_value = "2,4,8,16", value_delimiter = ',')]
    parts: Vec<usize>,
    /// grem or metis.
    #[arg(long, default_value = "grem")]
    partitioner: String,
    /// Fanouts, input layer first.
    #[arg(long, default_value = "10,25", value_delimiter = ',')]
    fanouts: Vec<i64>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let t = Instant::now();
    let ds = graph::load(&args.data, &LoadOptions::default())?;
    let g = ds.graph.symmetrize();
    let edges = undirected_edges(&g);
    println!(
        "{}: {} nodes, {} undirected edges, {} training seeds, {} features (f32: {} bytes a row); \
         {} parts, fanouts {:?} (loaded in {:.1} s)\n",
        args.data,
        g.num_nodes,
        edges,
        ds.split.train.len(),
        ds.feat_dim,
        4 * ds.feat_dim,
        args.partitioner,
        args.fanouts,
        t.elapsed().as_secs_f64()
    );
    println!(
        "| N | edge cut | input rows (all machines) | remote rows | remote share | busiest machine | all machines | 25 Gbit/s | 100 Gbit/s | partition s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let row_bytes = 4.0 * ds.feat_dim as f64;
    for &n in &args.parts {
        let t = Instant::now();
        let labels = match args.partitioner.as_str() {
            "grem" => grem_partition(
                &g,
                n,
                &GremOptions {
                    seed: args.seed,
                    ..GremOptions::default()
                },
            )?,
            "metis" => metis_graph_partition(&g, n, args.seed)?,
            other => {
                return Err(espalier::Error::invalid(format!(
                    "--partitioner {other}: expected grem or metis"
                )))
            }
        };
        let part_s = t.elapsed().as_secs_f64();
        let cut = edge_cut(&g, &labels)?;
        let fetch = remote_inputs(&g, &labels, n, &ds.split.train, &args.fanouts, args.seed)?;
        let inputs: usize = fetch.iter().map(|f| f.input_nodes).sum();
        let remote: usize = fetch.iter().map(|f| f.remote_inputs).sum();
        let busiest = fetch.iter().map(|f| f.remote_inputs).max().unwrap_or(0) as f64 * row_bytes;
        let total = remote as f64 * row_bytes;
        let secs = |gbit: f64| busiest * 8.0 / (gbit * 1e9);
        println!(
            "| {n} | {:.1}% | {inputs} | {remote} | {:.1}% | {:.1} MB | {:.1} MB | {:.3} s | {:.3} s | {part_s:.1} |",
            100.0 * cut as f64 / edges.max(1) as f64,
            100.0 * remote as f64 / inputs.max(1) as f64,
            busiest / 1e6,
            total / 1e6,
            secs(25.0),
            secs(100.0),
        );
    }
    Ok(())
}
