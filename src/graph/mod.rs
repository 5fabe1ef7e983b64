//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod array;
pub mod block;
mod block_sizes;
pub mod bucket;
pub mod chunks;
pub mod csr;
pub mod dataset;
pub mod io;
pub mod prepared;
pub mod sample;
pub mod slice;
pub(crate) mod slice_masks;
pub mod synth;

pub use array::Array;
pub use block::Block;
pub use block_sizes::BlockSizes;
pub use bucket::{degree_histogram, Bucket, Buckets};
pub use chunks::ChunkPlan;
pub use csr::Csr;
pub use dataset::{Dataset, LoadOptions, Split};
pub use prepared::{HostRows, Prepared};
pub use sample::{full_blocks, sample_blocks, Sampler};
pub use slice::Slicer;
pub use slice_masks::Footprints;

/// Datasets known by name, with the folder OGB's loaders give them under their root
/// (`ogbn-arxiv` lives in `ROOT/ogbn_arxiv/`).
pub const NAMED: [(&str, &str); 10] = [
    ("ogbn-arxiv", "ogbn_arxiv"),
    ("ogbn-products", "ogbn_products"),
    ("ogbn-papers100M", "ogbn_papers100M"),
    ("ogbn-proteins", "ogbn_proteins"),
    ("ogbn-mag", "ogbn_mag"),
    ("cora", "cora"),
    ("citeseer", "citeseer"),
    ("pubmed", "pubmed"),
    ("reddit", "reddit"),
    ("email-enron", "email-enron"),
];

/// What a `--dataset` value names.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A generated graph.
    Synthetic(synth::SynthSpec),
    /// An OGB-layout folder or an edge-list file.
    Path(std::path::PathBuf),
}

/// The root of named datasets: `opts.data_root`, else `$ESPALIER_DATA`, else `./dataset`
/// (OGB's default root).
pub fn data_root(opts: &LoadOptions) -> std::path::PathBuf {
    opts.data_root
        .clone()
        .or_else(|| {
            std::env::var_os("ESPALIER_DATA")
                .filter(|v| !v.is_empty())
                .map(Into::into)
        })
        .unwrap_or_else(|| "dataset".into())
}

/// Resolves a `--dataset` value: `synthetic:PRESET[,...]` (with `opts.seed`, `feat_dim`
/// and `classes` filling what the spec leaves out), an existing path, or a name such as
/// `ogbn-arxiv` or `cora` looked up under [`data_root`] (`ROOT/ogbn_arxiv/` or
/// `ROOT/NAME/`). A name not found there is an error saying where to put which files.
pub fn resolve(spec: &str, opts: &LoadOptions) -> crate::error::Result<Source> {
    use crate::error::Error;
    use std::path::Path;
    if let Some(s) = spec.strip_prefix("synthetic:") {
        return synth::SynthSpec::with_defaults(s, opts.seed, opts.feat_dim, opts.classes)
            .map(Source::Synthetic);
    }
    let p = Path::new(spec);
    if p.exists() {
        return Ok(Source::Path(p.to_path_buf()));
    }
    if spec.is_empty() || spec.contains(['/', '\\']) {
        return Err(Error::io(
            p,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        ));
    }
    let root = data_root(opts);
    let known = NAMED.iter().find(|(n, _)| n.eq_ignore_ascii_case(spec));
    let folder = known.map_or_else(|| spec.replace('-', "_"), |(_, f)| f.to_string());
    let mut candidates = vec![root.join(&folder)];
    if folder != spec {
        candidates.push(root.join(spec));
    }
    if let Some(c) = candidates.iter().find(|c| c.exists()) {
        return Ok(Source::Path(c.clone()));
    }
    let name = known.map_or(spec, |(n, _)| n);
    let dir = root.join(&folder);
    let mut msg = format!(
        "dataset {name}: not found; put its files in {d}/ in OGB's layout: \
         {d}/raw/edge.csv.gz and {d}/raw/num-node-list.csv.gz (required), \
         {d}/raw/node-feat.csv.gz and {d}/raw/node-label.csv.gz, and \
         {d}/split/NAME/{{train,valid,test}}.csv.gz (what OGB's NodePropPredDataset(name=\"{name}\", \
         root=\"{r}\") downloads and unpacks); espalier does not download. \
         --data-root DIR or ESPALIER_DATA sets the root (now {r})",
        d = dir.display(),
        r = root.display(),
    );
    if known.is_none() {
        let names: Vec<&str> = NAMED.iter().map(|(n, _)| *n).collect();
        msg.push_str(&format!(
            "; {spec:?} is also no file or folder here. Known names: {}; or \
             synthetic:PRESET",
            names.join(", ")
        ));
    }
    Err(Error::invalid(msg))
}

/// Loads a dataset from a spec (see [`resolve`]): `synthetic:PRESET[,scale=X][,seed=N]`
/// generates one in memory; anything else is a path to an OGB raw-layout folder or an
/// edge-list file, or a named dataset under the data root.
pub fn load(spec: &str, opts: &LoadOptions) -> crate::error::Result<Dataset> {
    load_with_status(spec, opts).map(|(d, _)| d)
}

/// [`load`], also telling what the dataset cache did.
pub fn load_with_status(
    spec: &str,
    opts: &LoadOptions,
) -> crate::error::Result<(Dataset, io::CacheStatus)> {
    match resolve(spec, opts)? {
        Source::Synthetic(s) => Ok((s.generate()?, io::CacheStatus::Disabled)),
        Source::Path(p) => Dataset::load_with_status(p, opts),
    }
}
