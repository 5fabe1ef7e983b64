//! Byte sizes as the flags take them and as every message prints them: [`parse_bytes`]
//! reads decimal (KB, MB, ...) and binary (KiB, MiB, ...) units, [`format_bytes`] writes
//! binary units (KiB, MiB, GiB), the units of the budgets users give.

use crate::error::{Error, Result};

/// Parses a byte size: a number with an optional unit `B`, `KB`/`KiB`, `MB`/`MiB`,
/// `GB`/`GiB` or `TB`/`TiB` (decimal and binary multiples; case-insensitive, spaces
/// allowed), e.g. `24GiB`, `1.5 GB`, `4096`.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        Error::invalid(format!(
            "byte size `{s}`: expected a number and a unit among B, KB, KiB, MB, MiB, GB, GiB, TB, TiB (e.g. 24GiB)"
        ))
    };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

/// A byte count for people: `512 B`, `1.50 KiB`, `24.00 GiB`.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_bytes("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_bytes("1.5 GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("7b").unwrap(), 7);
        assert_eq!(parse_bytes("2kib").unwrap(), 2048);
        assert_eq!(parse_bytes("3MB").unwrap(), 3_000_000);
        assert_eq!(parse_bytes("1TiB").unwrap(), 1 << 40);
        for bad in ["", "GiB", "12 parsecs", "-1GB", "1e3"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(24 << 30), "24.00 GiB");
    }
}
