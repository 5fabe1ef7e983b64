//! `espalier gen`: write a synthetic graph in OGB's raw layout.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use espalier::bytes::format_bytes;
use espalier::error::{Error, Result};
use espalier::graph::synth::{check_sizes, generate_to_ogb, SynthSpec};

/// Flags of `espalier gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]` (a leading `synthetic:` is
    /// accepted), with PRESET one of cora-like, arxiv-like, products-like, papers-like,
    /// as-like, road-like.
    pub spec: String,
    /// Output folder; `raw/` and `split/bench/` are written inside it. A folder that is not
    /// empty is refused unless --force.
    #[arg(long, short)]
    pub out: PathBuf,
    /// Replace the dataset in a non-empty folder: its `raw/`, `split/` and `espalier-cache/`
    /// are removed (once the spec's sizes are checked), then the new files written.
    #[arg(long)]
    pub force: bool,
}

/// The dataset parts of a folder that `--force` replaces.
const REPLACED: [&str; 3] = ["raw", "split", "espalier-cache"];

/// Refuses an output that is a file, or a non-empty folder without `force`.
fn check_out(out: &Path, force: bool) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        return Err(Error::io(
            out,
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a folder; --out takes a folder",
            ),
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(out)
        .map_err(|e| Error::io(out, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.is_empty() || force {
        return Ok(());
    }
    let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
    Err(Error::invalid(format!(
        "{} is not empty (holds {}{}): give --force to replace its dataset ({} are removed \
         first), or choose another --out",
        out.display(),
        shown.join(", "),
        if names.len() > shown.len() {
            ", ..."
        } else {
            ""
        },
        REPLACED.map(|r| format!("{r}/")).join(", ")
    )))
}

pub fn run(a: &GenArgs) -> Result<()> {
    let spec = SynthSpec::parse(a.spec.strip_prefix("synthetic:").unwrap_or(&a.spec))?;
    check_out(&a.out, a.force)?;
    eprintln!(
        "generating {}: {} nodes, {} edges, {} features, {} classes",
        spec.name(),
        spec.num_nodes(),
        spec.num_edges(),
        spec.preset.feat_dim,
        spec.preset.classes
    );
    // The spec's sizes are checked before anything is removed.
    check_sizes(&spec)?;
    if a.force && a.out.is_dir() {
        for r in REPLACED {
            let p = a.out.join(r);
            if p.is_dir() {
                std::fs::remove_dir_all(&p).map_err(|e| Error::io(&p, e))?;
                eprintln!("removed the old {}", p.display());
            }
        }
    }
    let t = Instant::now();
    let mut total = 0u64;
    // The generator streams: each file is drawn, formatted and compressed chunk by chunk,
    // so memory stays O(nodes) whatever the edge count.
    generate_to_ogb(&spec, &a.out, &mut |file, bytes, secs| {
        total += bytes;
        eprintln!(
            "  wrote {} ({}, {secs:.2}s)",
            a.out.join(file).display(),
            format_bytes(bytes)
        );
    })?;
    eprintln!(
        "wrote {} ({} nodes, {} edges, {} features, {} classes; {}) in OGB layout in {:.2}s",
        a.out.display(),
        spec.num_nodes(),
        spec.num_edges(),
        spec.preset.feat_dim,
        spec.preset.classes,
        format_bytes(total),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
