//! Outputs that are never half-written: a file is written to a temporary name in the same
//! folder, flushed to disk (`fsync`), then renamed over the target, so a reader sees either
//! the old content or the new, never a mix, and a crash or Ctrl-C leaves the old file as it
//! was. Used for JSON summaries, checkpoints, the dataset cache and `espalier gen`.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A file being written under a temporary name beside its target; [`AtomicFile::commit`]
/// makes it visible, dropping it without committing removes the temporary file.
pub struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    writer: Option<BufWriter<File>>,
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
        let tmp = temp_name(target);
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
            writer: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// The writer of the temporary file.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.writer
            .as_mut()
            .expect("the writer lives until commit, which consumes the AtomicFile")
    }

    /// Flushes, syncs and renames the temporary file over the target.
    pub fn commit(mut self) -> Result<()> {
        let writer = self
            .writer
            .take()
            .expect("the writer lives until commit, which consumes the AtomicFile");
        let file = writer
            .into_inner()
            .map_err(|e| Error::io(&self.tmp, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
        drop(file);
        fs::rename(&self.tmp, &self.target).map_err(|e| Error::io(&self.target, e))?;
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
        if self.writer.take().is_some() {
            // Not committed: the target keeps its old content; the partial file goes.
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
    fn a_folder_as_target_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_writable(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a folder"), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
