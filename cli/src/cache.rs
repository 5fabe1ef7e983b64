//! `espalier cache ls|clear`: see and remove the dataset cache
//! ([`espalier::graph::io::cache`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::UNIX_EPOCH;

use clap::{Args, Subcommand};

use espalier::bytes::format_bytes;
use espalier::error::Result;
use espalier::graph::io::cache::{self, Entry};
use espalier::graph::{self, LoadOptions, Source};

/// Flags of `espalier cache`.
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub action: CacheAction,
}

#[derive(Subcommand, Debug)]
pub enum CacheAction {
    /// List cache entries: file, dataset, nodes, edges, size, date.
    Ls(Where),
    /// Remove cache entries (all of the folder, or those of --dataset) and stale temporary
    /// files.
    Clear(Where),
}

/// Which cache folders, which dataset.
#[derive(Args, Debug)]
pub struct Where {
    /// The cache folder. Default: $ESPALIER_CACHE when set, else the folders of --dataset
    /// (its espalier-cache/ and the user-cache fallbacks), else ./espalier-cache and the
    /// user cache folder.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// A dataset (path or name): where its cache lives; `clear` removes only its entries.
    #[arg(long)]
    pub dataset: Option<String>,
    /// Root of named datasets (as for `train`).
    #[arg(long)]
    pub data_root: Option<PathBuf>,
}

/// The folders to look in, and the dataset's path when one is given.
fn folders(w: &Where) -> Result<(Vec<PathBuf>, Option<PathBuf>)> {
    let env = |k: &str| std::env::var_os(k);
    let data = match &w.dataset {
        Some(d) => {
            let opts = LoadOptions {
                data_root: w.data_root.clone(),
                ..LoadOptions::default()
            };
            match graph::resolve(d, &opts)? {
                Source::Path(p) => Some(p),
                Source::Synthetic(_) => {
                    return Err(espalier::Error::invalid(
                        "synthetic datasets are generated, never cached",
                    ))
                }
            }
        }
        None => None,
    };
    let probe = data.clone().unwrap_or_else(|| PathBuf::from("."));
    let mut dirs: Vec<PathBuf> = cache::cache_dirs(&probe, w.cache_dir.as_deref(), &env)
        .into_iter()
        .map(|c| c.path)
        .collect();
    if data.is_none()
        && w.cache_dir.is_none()
        && env("ESPALIER_CACHE").is_none_or(|v: OsString| v.is_empty())
    {
        // No dataset: the current folder's espalier-cache/ is the one "beside the data".
        dirs.retain(|d| d.exists() || d.ends_with(cache::DIR_NAME));
    }
    dirs.dedup();
    Ok((dirs, data))
}

/// Whether `e` belongs to the dataset at `data` (its folder or file name).
fn belongs(e: &Entry, data: &std::path::Path) -> bool {
    let canonical = data.canonicalize().unwrap_or_else(|_| data.to_path_buf());
    let stem = espalier::graph::io::cache::entry_stem(&canonical);
    let file = e
        .path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.strip_prefix(&stem)
        .is_some_and(|rest| rest.starts_with('-'))
}

/// `YYYY-MM-DD HH:MM` (UTC) of a modification time.
fn date(e: &Entry) -> String {
    let Some(secs) = e
        .modified
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64)
    else {
        return "-".to_string();
    };
    // Days to a civil date (Howard Hinnant's algorithm).
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

pub fn run(a: &CacheArgs) -> Result<()> {
    match &a.action {
        CacheAction::Ls(w) => {
            let (dirs, data) = folders(w)?;
            let mut total = (0usize, 0u64);
            for dir in &dirs {
                let entries: Vec<Entry> = cache::list(dir)?
                    .into_iter()
                    .filter(|e| data.as_deref().is_none_or(|d| belongs(e, d)))
                    .collect();
                println!("{}: {} entries", dir.display(), entries.len());
                for e in entries {
                    let name = e
                        .path
                        .file_name()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let what = match &e.problem {
                        Some(p) => format!("unusable: {p}"),
                        None => format!("{} ({} nodes, {} edges)", e.dataset, e.nodes, e.edges),
                    };
                    println!("  {name}  {what}  {}  {}", format_bytes(e.bytes), date(&e));
                    total.0 += 1;
                    total.1 += e.bytes;
                }
            }
            println!("{} entries, {}", total.0, format_bytes(total.1));
        }
        CacheAction::Clear(w) => {
            let (dirs, data) = folders(w)?;
            let mut total = (0usize, 0u64);
            for dir in &dirs {
                let (n, b) = cache::clear(dir, &|e: &Entry| {
                    data.as_deref().is_none_or(|d| belongs(e, d))
                })?;
                if n > 0 {
                    println!("{}: removed {n} files, {}", dir.display(), format_bytes(b));
                }
                total.0 += n;
                total.1 += b;
            }
            println!("removed {} files, {}", total.0, format_bytes(total.1));
        }
    }
    Ok(())
}
