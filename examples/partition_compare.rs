//! Compares the micro-batch partitioners on one sampled batch, and GREM with METIS as
//! whole-graph partitioners. Prints markdown tables (`docs/PARTITIONING.md`).
//!
//! ```sh
//! cargo run --example partition_compare -- \
//!     --data data/email-enron --data synthetic:products-like,scale=0.02 \
//!     --k 8 --fanouts 10,25 --mode all
//! ```
//!
//! Modes: `batch` (every micro-batch partitioner: redundancy, seconds, balance), `hubs`
//! (Betty's hub bound), `cherry` (Cherry's weights and non-seed handling), `graph` (GREM vs
//! METIS: edge cut, seconds, memory), `all`. Graphs are symmetrized; the seeds are the
//! dataset's training split.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use espalier::graph::{self, Block, Csr, LoadOptions};
use espalier::partition::betty::{betty, redundancy_graph, BettyOptions};
use espalier::partition::buffalo::{buffalo, BuffaloOptions};
use espalier::partition::cherry::{Cherry, CherryOptions, CherryWeight, FlowHops, NonSeeds};
use espalier::partition::grem::{grem_partition, grem_seeds, grem_working_bytes, GremOptions};
use espalier::partition::kway::{edge_cut, metis_seeds, undirected_edges, MetisGraph};
use espalier::partition::parts;
use espalier::rng::Rng;
use espalier::Result;

#[derive(Parser)]
struct Args {
    /// Dataset specs (a folder, an edge list or `synthetic:PRESET[,scale=X]`); repeatable.
    #[arg(long = "data", required = true)]
    data: Vec<String>,
    #[arg(long, default_value_t = 8)]
    k: usize,
    /// Fanouts, input layer first.
    #[arg(long, default_value = "10,25", value_delimiter = ',')]
    fanouts: Vec<i64>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// batch, hubs, cherry, graph or all.
    #[arg(long, default_value = "all")]
    mode: String,
    /// Hidden width of the estimator's model.
    #[arg(long, default_value_t = 256)]
    hidden: usize,
}

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    for spec in &args.data {
        let t = Instant::now();
        let ds = graph::load(spec, &LoadOptions::default())?;
        let g = ds.graph.symmetrize();
        println!(
            "\n## {spec}: {} nodes, {} directed edges after symmetrizing, {} train seeds, {} features (loaded in {:.1} s)\n",
            g.num_nodes,
            g.num_edges(),
            ds.split.train.len(),
            ds.feat_dim,
            t.elapsed().as_secs_f64()
        );
        let mode = args.mode.as_str();
        let needs_batch = matches!(mode, "batch" | "hubs" | "cherry" | "all");
        if needs_batch {
            let seeds = ds.split.train.clone();
            let t = Instant::now();
            let blocks: Vec<Arc<Block>> =
                graph::sample_blocks(&g, &seeds, &args.fanouts, args.seed)?
                    .into_iter()
                    .map(Arc::new)
                    .collect();
            let sizes: Vec<String> = blocks
                .iter()
                .map(|b| format!("{}->{} ({} edges)", b.num_src, b.num_dst, b.num_edges()))
                .collect();
            println!(
                "batch: {} (sampled in {:.2} s)\n",
                sizes.join(", "),
                t.elapsed().as_secs_f64()
            );
            let batch = Batch {
                seeds,
                blocks,
                graph: &g,
                k: args.k,
                seed: args.seed,
                feat_dim: ds.feat_dim,
                hidden: args.hidden,
                fanouts: args.fanouts.clone(),
            };
            if matches!(mode, "batch" | "all") {
                batch.compare()?;
            }
            if matches!(mode, "hubs" | "all") {
                batch.hubs()?;
            }
            if matches!(mode, "cherry" | "all") {
                batch.cherry_variants()?;
            }
        }
        if matches!(mode, "graph" | "all") {
            compare_graph(&g, args.k, args.seed)?;
        }
    }
    Ok(())
}

struct Batch<'g> {
    seeds: Vec<u32>,
    blocks: Vec<Arc<Block>>,
    graph: &'g Csr,
    k: usize,
    seed: u64,
    feat_dim: usize,
    hidden: usize,
    fanouts: Vec<i64>,
}

impl Batch<'_> {
    /// Peak-bytes stand-in: f32 features of the input nodes, f32 hidden activations of every
    /// other layer's src nodes, and 8 bytes per edge (index + value).
    fn estimator(&self) -> Result<impl Fn(&[u32]) -> u64 + '_> {
        let slicer = graph::Slicer::new(&self.blocks)?;
        Ok(move |s: &[u32]| {
            let sizes = match slicer.sizes(s) {
                Ok(sizes) => sizes,
                Err(_) => return u64::MAX,
            };
            let nodes: u64 = sizes
                .iter()
                .enumerate()
                .map(|(l, z)| {
                    z.num_src as u64 * if l == 0 { self.feat_dim } else { self.hidden } as u64
                })
                .sum();
            4 * nodes + 8 * sizes.iter().map(|z| z.num_edges as u64).sum::<u64>()
        })
    }

    fn row(&self, name: &str, parts: &[Vec<u32>], secs: f64) -> Result<()> {
        check(&self.seeds, parts, self.k)?;
        let est = self.estimator()?;
        let bytes: Vec<u64> = parts.iter().map(|p| est(p)).collect();
        let mean = bytes.iter().sum::<u64>() as f64 / bytes.len() as f64;
        let max = *bytes.iter().max().unwrap_or(&0) as f64;
        let s = partition_stats(&self.blocks, parts)?;
        println!(
            "| {name} | {:.3} | {secs:.3} | {:.3} | {:.3} | {:.3} |",
            s.redundancy,
            s.seeds_balance,
            s.inputs_balance,
            max / mean.max(1.0)
        );
        Ok(())
    }

    fn compare(&self) -> Result<()> {
        let (seeds, blocks, g, k, seed) =
            (&self.seeds, &self.blocks, self.graph, self.k, self.seed);
        println!("K = {k}\n");
        println!("| partitioner | redundancy | seconds | max/mean seeds | max/mean input nodes | max/mean est. bytes |");
        println!("|---|---|---|---|---|---|");
        let timed = |f: &dyn Fn() -> Result<Vec<Vec<u32>>>| -> Result<(Vec<Vec<u32>>, f64)> {
            let t = Instant::now();
            let p = f()?;
            Ok((p, t.elapsed().as_secs_f64()))
        };
        let (p, t) = timed(&|| Ok(random(seeds, k, seed)))?;
        self.row("random", &p, t)?;
        let (p, t) = timed(&|| Ok(range(seeds, k)))?;
        self.row("range", &p, t)?;
        let (p, t) = timed(&|| metis_seeds(seeds, blocks, g, k, seed))?;
        self.row("metis (seed-induced)", &p, t)?;
        let (p, t) = timed(&|| betty(seeds, blocks, g, k, seed, &BettyOptions::default()))?;
        self.row("betty (REG, hub bound 16/2)", &p, t)?;
        let (p, t) = timed(&|| betty(seeds, blocks, g, k, seed, &BettyOptions::exact()))?;
        self.row("betty (REG, exact AᵀA)", &p, t)?;
        let (p, t) = timed(&|| {
            // What the original code cut: DGL's METIS wrapper drops the edge weights.
            let mut reg = redundancy_graph(blocks, seed, &BettyOptions::exact())?;
            reg.adjwgt = None;
            let mut labels = reg.part_kway(k, seed)?;
            Ok(parts::groups_filled(seeds, &mut labels, k))
        })?;
        self.row("betty (exact REG, weights dropped as DGL does)", &p, t)?;
        for (name, non_seeds) in [("keep", NonSeeds::Keep), ("remove", NonSeeds::Remove)] {
            let cherry = Cherry::new(
                blocks.len(),
                CherryOptions {
                    non_seeds,
                    ..CherryOptions::default()
                },
            )?;
            let (p, t) = timed(&|| cherry.partition(seeds, blocks, g, k, seed))?;
            let (_, again) = timed(&|| cherry.partition(seeds, blocks, g, k, seed + 1))?;
            self.row(
                &format!("cherry ({name} non-seeds; cut once, {again:.3} s per later epoch)"),
                &p,
                t,
            )?;
        }
        let slicer = graph::Slicer::new(blocks)?;
        let (feat, hidden) = (self.feat_dim as u64, self.hidden as u64);
        // The same stand-in as `estimator`, from block sizes.
        let bytes = |s: &[graph::BlockSizes]| -> u64 {
            let nodes: u64 = s
                .iter()
                .enumerate()
                .map(|(l, b)| b.num_src as u64 * if l == 0 { feat } else { hidden })
                .sum();
            4 * nodes + 8 * s.iter().map(|b| b.num_edges as u64).sum::<u64>()
        };
        let (p, t) =
            timed(&|| buffalo(seeds, &slicer, k, seed, &bytes, &BuffaloOptions::default()))?;
        self.row("buffalo", &p, t)?;
        let (p, t) = timed(&|| grem_seeds(seeds, blocks, g, k, seed, &GremOptions::default()))?;
        self.row("grem (seed-induced)", &p, t)?;
        println!();
        Ok(())
    }

    fn hubs(&self) -> Result<()> {
        let (seeds, blocks, g, k, seed) =
            (&self.seeds, &self.blocks, self.graph, self.k, self.seed);
        println!("Betty's hub bound (K = {k}; a source read by more than D_max seeds joins each to hub_ring neighbours per side):\n");
        println!("| D_max / ring | REG entries | REG seconds | partition seconds | redundancy |");
        println!("|---|---|---|---|---|");
        let settings = [
            (usize::MAX, 8usize),
            (256, 8),
            (64, 8),
            (64, 2),
            (16, 8),
            (16, 4),
            (16, 2),
            (8, 2),
            (4, 1),
            (2, 1),
        ];
        for (d, r) in settings {
            let opts = BettyOptions {
                hub_degree: d,
                hub_ring: r,
                ..BettyOptions::default()
            };
            let t = Instant::now();
            let reg = redundancy_graph(blocks, seed, &opts)?;
            let reg_secs = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let p = betty(seeds, blocks, g, k, seed, &opts)?;
            let secs = t.elapsed().as_secs_f64();
            check(seeds, &p, k)?;
            let r_name = if d == usize::MAX {
                "exact".to_string()
            } else {
                format!("{d} / {r}")
            };
            println!(
                "| {r_name} | {} | {reg_secs:.3} | {secs:.3} | {:.3} |",
                reg.num_entries(),
                partition_stats(blocks, &p)?.redundancy
            );
        }
        let max_consumers = {
            let b = &blocks[blocks.len() - 1];
            (0..b.num_src)
                .map(|s| b.t_indptr[s + 1] - b.t_indptr[s])
                .max()
                .unwrap_or(0)
        };
        println!("\nmost seeds sharing one source: {max_consumers}\n");
        Ok(())
    }

    fn cherry_variants(&self) -> Result<()> {
        let (seeds, blocks, g, k, seed) =
            (&self.seeds, &self.blocks, self.graph, self.k, self.seed);
        println!("Cherry's variants (K = {k}; redundancy measured on this epoch's sample):\n");
        // The cut is reused: measure it on the next epoch's sample too.
        let next: Vec<Arc<Block>> = graph::sample_blocks(g, seeds, &self.fanouts, seed + 1)?
            .into_iter()
            .map(Arc::new)
            .collect();
        println!("| hops | non-seeds | weight | MFG nodes | MFG entries | cut seconds | redundancy | next epoch's redundancy | max/mean seeds |");
        println!("|---|---|---|---|---|---|---|---|---|");
        let variants = [FlowHops::Auto, FlowHops::One, FlowHops::Layers]
            .into_iter()
            .flat_map(|hops| {
                [NonSeeds::Keep, NonSeeds::Remove]
                    .into_iter()
                    .map(move |non_seeds| (hops, non_seeds))
            });
        for (hops, non_seeds) in variants {
            for weight in [
                CherryWeight::LogOutDegree,
                CherryWeight::OutDegree,
                CherryWeight::Unit,
            ] {
                let opts = CherryOptions {
                    hops,
                    non_seeds,
                    weight,
                    metis_seed: seed,
                    ..CherryOptions::default()
                };
                let mfg =
                    espalier::partition::cherry::message_flow_graph(g, seeds, blocks.len(), &opts)?;
                let cherry = Cherry::new(blocks.len(), opts)?;
                let t = Instant::now();
                let p = cherry.partition(seeds, blocks, g, k, seed)?;
                let secs = t.elapsed().as_secs_f64();
                check(seeds, &p, k)?;
                let s = partition_stats(blocks, &p)?;
                let later = cherry.partition(seeds, &next, g, k, seed + 1)?;
                println!(
                    "| {hops:?} | {non_seeds:?} | {weight:?} | {} | {} | {secs:.3} | {:.3} | {:.3} | {:.3} |",
                    mfg.num_nodes(),
                    mfg.num_entries(),
                    s.redundancy,
                    partition_stats(&next, &later)?.redundancy,
                    s.seeds_balance
                );
            }
        }
        println!();
        Ok(())
    }
}

/// GREM vs METIS as graph partitioners (and a random assignment for scale).
fn compare_graph(g: &Csr, k: usize, seed: u64) -> Result<()> {
    let sym = g.remove_self_loops();
    let edges = undirected_edges(&sym);
    println!("Whole-graph partition into K = {k} ({edges} undirected edges):\n");
    println!("| partitioner | edge cut | cut fraction | max/mean part | seconds | working bytes (own count) | peak RSS growth |");
    println!("|---|---|---|---|---|---|---|");
    let report =
        |name: &str, labels: &[u32], secs: f64, bytes: usize, rss: Option<u64>| -> Result<()> {
            let cut = edge_cut(&sym, labels)?;
            let mut sizes = vec![0usize; k];
            for &l in labels {
                sizes[l as usize] += 1;
            }
            let mean = labels.len() as f64 / k as f64;
            let max = *sizes.iter().max().unwrap_or(&0) as f64;
            println!(
                "| {name} | {cut} | {:.4} | {:.3} | {secs:.3} | {} | {} |",
                cut as f64 / edges.max(1) as f64,
                max / mean,
                mib(bytes as u64),
                rss.map_or("n/a".to_string(), mib)
            );
            Ok(())
        };
    let mut rng = Rng::new(seed);
    let labels: Vec<u32> = (0..sym.num_nodes)
        .map(|_| rng.below(k as u64) as u32)
        .collect();
    report("random", &labels, 0.0, 0, None)?;

    let base = reset_peak_rss();
    let t = Instant::now();
    let mg = MetisGraph::from_symmetric_csr(&sym)?;
    let mut labels = mg.part_kway(k, seed)?;
    parts::fill_empty(&mut labels, k);
    let secs = t.elapsed().as_secs_f64();
    let rss = base.and_then(|b| peak_rss().map(|p| p.saturating_sub(b)));
    // METIS's manual puts its workspace at a small multiple of the graph; count its input
    // arrays plus the label array here and read the RSS growth for the rest.
    report(
        "METIS k-way",
        &labels,
        secs,
        mg.bytes() + 4 * sym.num_nodes,
        rss,
    )?;
    drop(mg);

    for passes in [3usize, 4, 6, 8] {
        let opts = GremOptions {
            passes,
            seed,
            ..GremOptions::default()
        };
        let base = reset_peak_rss();
        let t = Instant::now();
        let labels = grem_partition(&sym, k, &opts)?;
        let secs = t.elapsed().as_secs_f64();
        let rss = base.and_then(|b| peak_rss().map(|p| p.saturating_sub(b)));
        report(
            &format!(
                "GREM ({passes} pass{})",
                if passes == 1 { "" } else { "es" }
            ),
            &labels,
            secs,
            grem_working_bytes(&sym, k, &opts),
            rss,
        )?;
    }
    println!();
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// Resets the kernel's peak-RSS mark to the current RSS (Linux `clear_refs`); returns the
/// current RSS in bytes, or `None` where that is not available.
fn reset_peak_rss() -> Option<u64> {
    trim_heap();
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_kib("VmRSS:").map(|k| k * 1024)
}

/// Hands the allocator's free pages back to the kernel, so that a measured call's
/// allocations show up as RSS growth instead of reusing pages freed earlier.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim only releases free heap pages; it takes no pointers.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

fn peak_rss() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

fn status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A fresh random permutation of the seeds, cut into K equal chunks.
fn random(seeds: &[u32], k: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut s = seeds.to_vec();
    let mut rng = Rng::new(seed);
    for i in (1..s.len()).rev() {
        s.swap(i, rng.below(i as u64 + 1) as usize);
    }
    chunks(&s, k)
}

/// Contiguous chunks of the id-sorted seeds.
fn range(seeds: &[u32], k: usize) -> Vec<Vec<u32>> {
    let mut s = seeds.to_vec();
    s.sort_unstable();
    chunks(&s, k)
}

fn chunks(s: &[u32], k: usize) -> Vec<Vec<u32>> {
    (0..k)
        .map(|j| s[j * s.len() / k..(j + 1) * s.len() / k].to_vec())
        .collect()
}

/// K non-empty disjoint lists covering the seeds.
fn check(seeds: &[u32], p: &[Vec<u32>], k: usize) -> Result<()> {
    let mut all: Vec<u32> = p.iter().flatten().copied().collect();
    all.sort_unstable();
    let mut want = seeds.to_vec();
    want.sort_unstable();
    if p.len() != k || p.iter().any(Vec::is_empty) || all != want {
        return Err(espalier::Error::invalid("a partitioner broke the contract"));
    }
    parts::check_k("check", seeds.len(), k)
}

/// Quality of a partition of one batch.
struct PartitionStats {
    /// `Σ_k input nodes_k / batch input nodes`.
    redundancy: f64,
    /// Largest part's seed count over the mean seed count.
    seeds_balance: f64,
    /// Largest part's input nodes over the mean input nodes.
    inputs_balance: f64,
}

/// Redundancy and balance of `parts` (seed lists) of the batch `blocks`, from the input
/// nodes [`graph::Slicer::sizes`] counts for each part.
fn partition_stats(blocks: &[Arc<Block>], parts: &[Vec<u32>]) -> Result<PartitionStats> {
    let slicer = graph::Slicer::new(blocks)?;
    let input_nodes = parts
        .iter()
        .map(|p| slicer.sizes(p).map(|z| z[0].num_src))
        .collect::<Result<Vec<usize>>>()?;
    let batch = slicer.full_sizes()[0].num_src.max(1);
    let ratio = |v: Vec<usize>| {
        let mean = v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
        let max = v.iter().copied().max().unwrap_or(0) as f64;
        if mean > 0.0 {
            max / mean
        } else {
            1.0
        }
    };
    Ok(PartitionStats {
        redundancy: input_nodes.iter().sum::<usize>() as f64 / batch as f64,
        seeds_balance: ratio(parts.iter().map(Vec::len).collect()),
        inputs_balance: ratio(input_nodes),
    })
}
