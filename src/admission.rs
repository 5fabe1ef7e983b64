//! Memory admission: before a large host allocation (a graph's arrays, a feature matrix,
//! a loader's buffers), the bytes it plans are compared with what the system can still
//! give this process, and a plan that cannot fit is an error naming the input and the
//! size, instead of an allocation that the system grants (Linux overcommits) and whose
//! pages then exhaust the machine when they are touched, until its out-of-memory killer
//! ends the run, or another program.
//!
//! What the system can give ([`available`]) is the smallest of: `MemAvailable` of
//! `/proc/meminfo` (free memory plus what the kernel can reclaim); for each cgroup the
//! process is in (v2, or v1's memory controller) that has a limit, the limit less the
//! usage that cannot be reclaimed (usage less inactive file pages); and the process's
//! own limits, `RLIMIT_AS` less its address space and `RLIMIT_DATA` less its data
//! segment (`ulimit -v`, `ulimit -d`, read from `/proc/self/limits`). Where none of these
//! can be read (not Linux), [`admit`] asks the allocator to reserve the bytes and releases
//! them at once, which catches a size beyond the address space only.
//!
//! Admission is a check at one moment, not a reservation: memory mapped from the dataset
//! cache is not counted (the system pages it in and out), and another program may take
//! what was free a moment later.

use std::path::Path;

use crate::error::{Error, Result};

/// What the system can still give this process, and which limit says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// The limit that gives them, in words (`MemAvailable`, `cgroup memory.max`, ...).
    pub limit: String,
}

/// The bytes this process can still allocate and touch, and which limit binds; `None`
/// where no limit can be read.
pub fn available() -> Option<Available> {
    available_in(Path::new("/"))
}

/// [`available`] with the system's files read under `root` (for tests: a fake `/proc`
/// and `/sys/fs/cgroup`).
fn available_in(root: &Path) -> Option<Available> {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let mut best: Option<Available> = None;
    let mut offer = |bytes: u64, limit: String| {
        if best.as_ref().is_none_or(|b| bytes < b.bytes) {
            best = Some(Available { bytes, limit });
        }
    };
    if let Some(kib) = read("proc/meminfo").and_then(|t| field_kib(&t, "MemAvailable:")) {
        offer(
            kib.saturating_mul(1024),
            "MemAvailable in /proc/meminfo".into(),
        );
    }
    if let Some(cgroups) = read("proc/self/cgroup") {
        for (bytes, limit) in cgroup_room(root, &cgroups) {
            offer(bytes, limit);
        }
    }
    if let (Some(limits), Some(status)) = (read("proc/self/limits"), read("proc/self/status")) {
        for (row, used, name) in [
            ("Max address space", "VmSize:", "RLIMIT_AS (ulimit -v)"),
            ("Max data size", "VmData:", "RLIMIT_DATA (ulimit -d)"),
        ] {
            if let (Some(max), Some(kib)) = (soft_limit(&limits, row), field_kib(&status, used)) {
                offer(max.saturating_sub(kib.saturating_mul(1024)), name.into());
            }
        }
    }
    best
}

/// The number after `key` in a `/proc` text of `key value kB` lines.
fn field_kib(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// The soft limit of a row of `/proc/self/limits` (`None` when unlimited).
fn soft_limit(limits: &str, row: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    line[row.len()..].split_whitespace().next()?.parse().ok()
}

/// Limits at or above this mean none (cgroup v1 writes "no limit" as a page-rounded
/// `i64::MAX`).
const NO_LIMIT: u64 = 1 << 60;

/// For every cgroup of `/proc/self/cgroup` (and its ancestors) with a memory limit: the
/// room left under it and its name.
fn cgroup_room(root: &Path, cgroups: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, max, current, inactive) = if controllers.is_empty() {
            (
                "sys/fs/cgroup",
                "memory.max",
                "memory.current",
                "inactive_file",
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            )
        } else {
            continue;
        };
        // The process's own group and every ancestor: a limit may be set on any of them.
        let mut dir = Some(Path::new(path.trim_start_matches('/')));
        while let Some(d) = dir {
            let group = root.join(base).join(d);
            let num = |f: &str| -> Option<u64> {
                std::fs::read_to_string(group.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            if let (Some(limit), Some(used)) = (num(max), num(current)) {
                if limit < NO_LIMIT {
                    let reclaimable = std::fs::read_to_string(group.join("memory.stat"))
                        .ok()
                        .and_then(|s| {
                            s.lines()
                                .find_map(|l| l.strip_prefix(inactive)?.trim().parse().ok())
                        })
                        .unwrap_or(0u64);
                    let pinned = used.saturating_sub(reclaimable);
                    let name = format!("cgroup /{}", d.join(max).display());
                    out.push((limit.saturating_sub(pinned), name));
                }
            }
            dir = d.parent();
        }
    }
    out
}

/// `1.5 GiB`-style sizes.
pub fn human(bytes: u128) -> String {
    let mut x = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if x < 1024.0 {
            return if unit == "B" {
                format!("{bytes} B")
            } else {
                format!("{x:.1} {unit}")
            };
        }
        x /= 1024.0;
    }
    format!("{x:.1} PiB")
}

/// Checks that `bytes` can be allocated now: an error naming `what` (the input that asks
/// for them and what they hold), the size and the binding limit when they exceed
/// [`available`]. Where no limit can be read, only that the address space can hold them.
pub fn admit(bytes: u128, what: impl FnOnce() -> String) -> Result<()> {
    admit_within(bytes, available(), what)
}

/// [`admit`] against a given availability.
fn admit_within(
    bytes: u128,
    avail: Option<Available>,
    what: impl FnOnce() -> String,
) -> Result<()> {
    match avail {
        Some(a) if bytes > a.bytes as u128 => Err(Error::invalid(format!(
            "{}: needs {}, more than the {} this process can still get ({})",
            what(),
            human(bytes),
            human(a.bytes as u128),
            a.limit
        ))),
        Some(_) => Ok(()),
        None => {
            // Reserved and released at once: only the address space is checked.
            let reserved =
                usize::try_from(bytes).is_ok_and(|b| Vec::<u8>::new().try_reserve_exact(b).is_ok());
            if reserved {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "{}: cannot allocate {}",
                    what(),
                    human(bytes)
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units\n\
        Max data size             unlimited            unlimited            bytes\n\
        Max address space         8589934592           unlimited            bytes\n";

    #[test]
    fn the_smallest_limit_binds_cgroup_and_rlimit_included() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(
            r,
            "proc/meminfo",
            "MemTotal: 100 kB\nMemAvailable:   20971520 kB\n",
        );
        assert_eq!(
            available_in(r),
            Some(Available {
                bytes: 20 << 30,
                limit: "MemAvailable in /proc/meminfo".into()
            })
        );
        // ulimit -v 8 GiB with 1 GiB of address space in use: 7 GiB left.
        put(r, "proc/self/limits", LIMITS);
        put(
            r,
            "proc/self/status",
            "VmSize:\t 1048576 kB\nVmData:\t 10 kB\n",
        );
        let a = available_in(r).unwrap();
        assert_eq!(
            (a.bytes, a.limit.as_str()),
            (7 << 30, "RLIMIT_AS (ulimit -v)")
        );
        // cgroup v2: a 4 GiB limit on the parent, 3 GiB used of which 1 GiB reclaimable.
        put(r, "proc/self/cgroup", "0::/job/step\n");
        put(r, "sys/fs/cgroup/job/step/memory.max", "max\n");
        put(r, "sys/fs/cgroup/job/step/memory.current", "5\n");
        put(r, "sys/fs/cgroup/job/memory.max", "4294967296\n");
        put(r, "sys/fs/cgroup/job/memory.current", "3221225472\n");
        put(
            r,
            "sys/fs/cgroup/job/memory.stat",
            "anon 1\ninactive_file 1073741824\n",
        );
        let a = available_in(r).unwrap();
        assert_eq!(
            (a.bytes, a.limit.as_str()),
            (2 << 30, "cgroup /job/memory.max")
        );
        // cgroup v1's memory controller, unlimited: no change.
        put(r, "proc/self/cgroup", "4:cpu,memory:/old\n");
        put(
            r,
            "sys/fs/cgroup/memory/old/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        put(r, "sys/fs/cgroup/memory/old/memory.usage_in_bytes", "7\n");
        assert_eq!(available_in(r).unwrap().bytes, 7 << 30);
        put(
            r,
            "sys/fs/cgroup/memory/old/memory.limit_in_bytes",
            "1048576\n",
        );
        let a = available_in(r).unwrap();
        assert_eq!(a.bytes, 1048576 - 7);
        assert_eq!(a.limit, "cgroup /old/memory.limit_in_bytes");
    }

    #[test]
    fn an_allocation_past_the_limit_is_an_error_naming_the_input_and_the_sizes() {
        let avail = Some(Available {
            bytes: 1 << 30,
            limit: "MemAvailable in /proc/meminfo".into(),
        });
        admit_within(1 << 20, avail.clone(), || unreachable!()).unwrap();
        let err = admit_within(16 << 30, avail, || "raw/edge.csv.gz: graph".into())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("raw/edge.csv.gz: graph: needs 16.0 GiB"),
            "{err}"
        );
        assert!(
            err.contains("1.0 GiB") && err.contains("MemAvailable"),
            "{err}"
        );
        assert!(admit_within(u128::MAX, None, || "x".into()).is_err());
    }

    #[test]
    fn this_machine_reports_a_limit() {
        if cfg!(target_os = "linux") {
            let a = available().expect("Linux has /proc/meminfo");
            assert!(a.bytes > 0, "{a:?}");
        }
    }
}
