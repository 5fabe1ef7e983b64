//! Times one load of a dataset folder through the binary cache and says what the cache
//! did; run it under `/usr/bin/time -v` for the peak memory of a load alone.
//!
//! ```sh
//! cargo run --release --example load_time -- DATA_DIR [CACHE_DIR]
//! ```
//!
//! The first run parses the text files and writes the cache entry; later runs read the
//! entry (memory-mapped: the arrays are paged in when something reads them, so the peak
//! memory of a load is far below the dataset's size).

use std::time::Instant;

use espalier::graph::{Dataset, LoadOptions};

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> espalier::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: load_time DATA_DIR [CACHE_DIR]");
        std::process::exit(2);
    };
    let opts = LoadOptions {
        cache_dir: args.next().map(Into::into),
        ..LoadOptions::default()
    };
    let t = Instant::now();
    let (d, status) = Dataset::load_with_status(&dir, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    if let Some(line) = status.message() {
        println!("{line}");
    }
    println!(
        "load: {secs:.3} s: {} nodes, {} edges, {} features, {} classes, split {}/{}/{}",
        d.num_nodes(),
        d.num_edges(),
        d.feat_dim,
        d.num_classes,
        d.split.train.len(),
        d.split.valid.len(),
        d.split.test.len()
    );
    Ok(())
}
