//! Outputs that are never half-written: a file is written to a temporary name in the same
//! folder, flushed to disk (`fsync`), then renamed over the target, so a reader sees either
//! the old content or the new, never a mix, and a crash or Ctrl-C leaves the old file as it
//! was. Used for JSON summaries, checkpoints, the dataset cache and `espalier gen`.
//!
//! A write that fails at any step (a full disk, a rename refused) removes its temporary
//! file, and the error names the target, not the temporary name the user never chose. The
//! temporary files are `.NAME.tmp.PID.N` beside the target; one left by a process that was
//! killed mid-write is removed by the next write into the same folder ([`remove_stale_temps`]:
//! its writer's process is gone, or it has not been written to for [`STALE_AFTER`]), never
//! one that a live run is still writing.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

/// A temporary file not written to for this long is stale whatever its writer's process:
/// no write of espalier's pauses that long, and the process id may have been reused.
pub const STALE_AFTER: Duration = Duration::from_secs(6 * 3600);
/// A temporary file whose writer's process is gone is stale once it has not been written
/// to for this long (a grace for a writer on another machine sharing the folder, whose
/// process id means nothing here).
pub const DEAD_WRITER_GRACE: Duration = Duration::from_secs(60);

/// A file being written under a temporary name beside its target; [`AtomicFile::commit`]
/// makes it visible, dropping it without committing removes the temporary file.
pub struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    writer: Option<BufWriter<File>>,
    /// Set once the rename succeeded: only then does the temporary name no longer exist.
    committed: bool,
}

impl AtomicFile {
    /// Starts writing `target`: creates its parent folders and a temporary file beside it.
    /// Fails (without creating anything else) when `target` is an existing folder.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        if target.is_dir() {
            return Err(Error::io(
                target,
                std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "is a folder; expected a file path",
                ),
            ));
        }
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        remove_stale_temps(dir, DEAD_WRITER_GRACE);
        let tmp = temp_name(target);
        // The error names the target: the temporary name is ours, not the user's.
        let file = File::create(&tmp).map_err(|e| Error::io(target, e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
            writer: Some(BufWriter::with_capacity(1 << 20, file)),
            committed: false,
        })
    }

    /// The writer of the temporary file.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.writer
            .as_mut()
            .expect("the writer lives until commit, which consumes the AtomicFile")
    }

    /// Flushes, syncs and renames the temporary file over the target. On failure the
    /// temporary file is removed (when `self` drops) and the error names the target.
    pub fn commit(mut self) -> Result<()> {
        let writer = self
            .writer
            .take()
            .expect("the writer lives until commit, which consumes the AtomicFile");
        let file = writer
            .into_inner()
            .map_err(|e| Error::io(&self.target, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&self.target, e))?;
        drop(file);
        fs::rename(&self.tmp, &self.target).map_err(|e| Error::io(&self.target, e))?;
        self.committed = true;
        sync_parent(&self.target);
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            // Not committed (dropped, or a step of `commit` failed): the target keeps its
            // old content; the partial file goes, with the space it took.
            drop(self.writer.take());
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename).
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.writer()
        .write_all(bytes)
        .map_err(|e| Error::io(path, e))?;
    f.commit()
}

/// Checks, before long work, that `path` can later be written: it is not a folder, its
/// parent folder exists or can be created, and a file can be created there. Leaves no
/// file behind.
pub fn check_writable(path: &Path) -> Result<()> {
    let f = AtomicFile::create(path)?;
    drop(f);
    Ok(())
}

/// Removes the temporary files of espalier's pattern (`.NAME.tmp.PID.N`) in `dir` that no
/// live writer holds: not written to for [`STALE_AFTER`], or for `grace` when no process
/// with their PID runs on this machine (where that can be told: Linux's `/proc`). Other
/// files are never touched. Returns the number of files and bytes removed; an unreadable
/// folder has none.
pub fn remove_stale_temps(dir: &Path, grace: Duration) -> (usize, u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return (0, 0);
    };
    let now = SystemTime::now();
    let (mut files, mut bytes) = (0, 0);
    for e in entries.flatten() {
        let Some(pid) = temp_pid(&e.file_name().to_string_lossy()) else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let idle = meta
            .modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or(Duration::ZERO);
        let stale = idle >= STALE_AFTER || (idle >= grace && process_gone(pid));
        if stale && fs::remove_file(e.path()).is_ok() {
            files += 1;
            bytes += meta.len();
        }
    }
    (files, bytes)
}

/// The writer's process id of a temporary file name of [`temp_name`]'s pattern.
fn temp_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (stem, tail) = rest.rsplit_once(".tmp.")?;
    let (pid, n) = tail.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (!stem.is_empty() && digits(pid) && digits(n))
        .then(|| pid.parse().ok())
        .flatten()
}

/// Whether no process with this id runs on this machine; `false` where that cannot be
/// told (no `/proc`), so that only [`STALE_AFTER`] applies there.
fn process_gone(pid: u32) -> bool {
    let proc_fs = Path::new("/proc/self");
    proc_fs.exists() && !Path::new("/proc").join(pid.to_string()).exists()
}

/// `.NAME.tmp.PID.N` beside `target`: hidden, unique per process and call.
fn temp_name(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = target
        .file_name()
        .map_or_else(|| "out".into(), |s| s.to_string_lossy().into_owned());
    target.with_file_name(format!(".{name}.tmp.{}.{n}", std::process::id()))
}

/// Makes the rename durable where the platform allows syncing a folder.
fn sync_parent(target: &Path) {
    #[cfg(unix)]
    if let Some(parent) = target.parent() {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        if let Ok(dir) = File::open(parent) {
            // Best effort: the data itself is already synced; some filesystems refuse this.
            let _ = dir.sync_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.json");
        write(&path, b"one").unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.json")]);
    }

    #[test]
    fn dropped_without_commit_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write(&path, b"good").unwrap();
        let mut f = AtomicFile::create(&path).unwrap();
        f.writer().write_all(b"half").unwrap();
        drop(f);
        assert_eq!(fs::read(&path).unwrap(), b"good");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_commit_removes_the_temp_and_names_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        let mut f = AtomicFile::create(&path).unwrap();
        f.writer().write_all(b"data").unwrap();
        // A folder (not empty) appears at the target: the rename must fail.
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"x").unwrap();
        let err = f.commit().unwrap_err().to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(!err.contains(".tmp."), "{err}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.json")]);
    }

    /// A process id that runs nowhere on this machine.
    fn dead_pid() -> u32 {
        (1..4_000_000u32)
            .rev()
            .find(|p| !Path::new("/proc").join(p.to_string()).exists())
            .unwrap()
    }

    fn age(path: &Path, by: Duration) {
        let f = fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn the_next_write_removes_temps_of_dead_writers_and_keeps_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let dead = dead_pid();
        let me = std::process::id();
        let files = [
            (
                format!(".ck.safetensors.tmp.{dead}.3"),
                DEAD_WRITER_GRACE * 2,
                false,
            ),
            (format!(".out.json.tmp.{dead}.0"), Duration::ZERO, true),
            (format!(".out.json.tmp.{me}.7"), DEAD_WRITER_GRACE * 2, true),
            (format!(".out.json.tmp.{me}.8"), STALE_AFTER * 2, false),
            (".notes.tmp.x.1".to_string(), STALE_AFTER * 2, true),
            ("out.json.tmp.1.1".to_string(), STALE_AFTER * 2, true),
        ];
        for (name, idle, _) in &files {
            fs::write(d.join(name), b"partial").unwrap();
            age(&d.join(name), *idle);
        }
        write(&d.join("out.json"), b"new").unwrap();
        for (name, _, kept) in &files {
            #[cfg(not(target_os = "linux"))]
            if name.contains(&dead.to_string()) {
                continue;
            }
            assert_eq!(d.join(name).exists(), *kept, "{name}");
        }
        assert_eq!(fs::read(d.join("out.json")).unwrap(), b"new");
    }

    #[test]
    fn temp_names_give_their_writer() {
        let t = temp_name(Path::new("a/b.json"));
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(temp_pid(&name), Some(std::process::id()));
        assert_eq!(temp_pid(".b.json.tmp.12.0"), Some(12));
        for not_ours in [
            "b.json.tmp.12.0",
            ".b.json.tmp.12",
            ".b.json.tmp.x.0",
            ".tmp.1.2",
        ] {
            assert_eq!(temp_pid(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn a_folder_as_target_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_writable(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a folder"), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
