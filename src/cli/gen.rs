//! `espalier gen`: write a synthetic graph in OGB's raw layout.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use espalier::error::Result;
use espalier::graph::io::write::write_ogb;
use espalier::graph::synth::SynthSpec;

/// Flags of `espalier gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// `PRESET[,scale=X][,seed=N]` (a leading `synthetic:` is accepted), with PRESET one of
    /// cora-like, arxiv-like, products-like, papers-like.
    pub spec: String,
    /// Output folder; `raw/` and `split/bench/` are written inside it.
    #[arg(long, short)]
    pub out: PathBuf,
}

pub fn run(a: &GenArgs) -> Result<()> {
    let spec = SynthSpec::parse(a.spec.strip_prefix("synthetic:").unwrap_or(&a.spec))?;
    let t = Instant::now();
    eprintln!(
        "generating {}: {} nodes, {} edges",
        spec.name(),
        spec.num_nodes(),
        spec.num_edges()
    );
    let data = spec.generate()?;
    let gen_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    write_ogb(&data, &a.out)?;
    eprintln!(
        "wrote {} ({} nodes, {} edges, {} features, {} classes) in OGB layout: generated in {gen_s:.2}s, written in {:.2}s",
        a.out.display(),
        data.num_nodes(),
        data.num_edges(),
        data.feat_dim,
        data.num_classes,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
