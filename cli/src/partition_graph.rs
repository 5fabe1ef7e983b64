//! `espalier partition --graph-only`: partition the whole (symmetrized) graph with GREM or
//! METIS and report the edge cut, the balance of the parts, seconds and working memory.

use std::time::Instant;

use serde::Serialize;

use espalier::bytes::format_bytes;
use espalier::error::{Error, Result};
use espalier::graph::Csr;
use espalier::partition::grem::{grem_partition, grem_working_bytes, GremOptions};
use espalier::partition::kway::{edge_cut, metis_graph_partition, undirected_edges};

/// Partitioners that can cut a whole graph.
pub const GRAPH_NAMES: &[&str] = &["grem", "metis"];

/// One whole-graph partition.
#[derive(Serialize)]
pub struct GraphCut {
    pub partitioner: String,
    pub k: usize,
    /// Undirected simple edges whose endpoints have different labels.
    pub edge_cut: u64,
    /// `edge_cut` over the undirected simple edges.
    pub cut_fraction: f64,
    /// Largest part over the mean part, in nodes.
    pub balance: f64,
    pub seconds: f64,
    /// GREM: its own state; METIS: the `xadj`/`adjncy` arrays handed to it plus the labels.
    pub working_bytes: u64,
}

/// Checks that `name` can cut a whole graph.
pub fn check_name(name: &str) -> Result<()> {
    if GRAPH_NAMES.contains(&name) {
        Ok(())
    } else {
        Err(Error::flag(
            "--graph-only",
            format!(
                "--graph-only partitions with {}, not `{name}`",
                GRAPH_NAMES.join(" or ")
            ),
        ))
    }
}

/// Cuts `graph` into `k` parts with `name` (grem or metis), seeded by `seed`.
pub fn cut(graph: &Csr, name: &str, k: usize, seed: u64) -> Result<GraphCut> {
    check_name(name)?;
    let edges = undirected_edges(graph);
    let t = Instant::now();
    let (labels, working_bytes) = if name == "grem" {
        let opts = GremOptions {
            seed,
            ..GremOptions::default()
        };
        let bytes = grem_working_bytes(graph, k, &opts) as u64;
        (grem_partition(graph, k, &opts)?, bytes)
    } else {
        // xadj (n + 1), adjncy (both directions of every edge), one label per node.
        let bytes = 4 * (2 * graph.num_nodes as u64 + 1 + 2 * edges);
        (metis_graph_partition(graph, k, seed)?, bytes)
    };
    let seconds = t.elapsed().as_secs_f64();
    let cut = edge_cut(graph, &labels)?;
    let mut sizes = vec![0u64; k];
    for &l in &labels {
        sizes[l as usize] += 1;
    }
    let max = sizes.iter().copied().max().unwrap_or(0) as f64;
    Ok(GraphCut {
        partitioner: name.to_string(),
        k,
        edge_cut: cut,
        cut_fraction: cut as f64 / edges.max(1) as f64,
        balance: max * k as f64 / graph.num_nodes.max(1) as f64,
        seconds,
        working_bytes,
    })
}

/// Prints one table of whole-graph cuts.
pub fn print(cuts: &[GraphCut]) {
    println!(
        "{:<10} {:>4} {:>12} {:>9} {:>9} {:>9} {:>12}",
        "partitioner", "K", "edge cut", "fraction", "max/mean", "seconds", "working"
    );
    for c in cuts {
        println!(
            "{:<10} {:>4} {:>12} {:>9.4} {:>9.3} {:>9.3} {:>12}",
            c.partitioner,
            c.k,
            c.edge_cut,
            c.cut_fraction,
            c.balance,
            c.seconds,
            format_bytes(c.working_bytes)
        );
    }
}
