//! Parallel parsing of line-oriented text files, plain or gzip-compressed.
//!
//! One thread decompresses the file into blocks of about [`BLOCK`] bytes cut at line ends;
//! meanwhile the rayon pool parses the previous block in line-aligned chunks of about
//! [`CHUNK`] bytes. Each chunk reports how many lines it held, so an error found inside a
//! chunk is turned into the file's 1-based line number once the chunks before it are known
//! to be clean. Chunk outputs reach the caller in file order, so results do not depend on
//! the number of threads.
//!
//! Lines end with `\n`; a trailing `\r` is dropped. The text after the last `\n` is a line
//! only if it is not empty, so `"1\n\n"` holds two lines (`"1"` and `""`), like pandas'
//! `skip_blank_lines=False`. A UTF-8 byte-order mark opening the file (as spreadsheet
//! programs and Windows editors write) is skipped, as pandas does; a file in UTF-16 (its
//! byte-order mark) is an error that says so.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::mpsc;

use flate2::read::MultiGzDecoder;
use rayon::prelude::*;

use crate::error::{Error, Result};

/// Bytes decompressed ahead of the parser (two blocks are in flight at most).
const BLOCK: usize = 16 << 20;
/// Bytes per parallel parsing task.
const CHUNK: usize = 1 << 20;
/// The UTF-8 encoding of U+FEFF, the byte-order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Parses one line at a time into a per-chunk output.
pub(crate) trait LineParser: Sync {
    /// What one chunk of lines produces (e.g. a `Vec<u32>`).
    type Out: Send + Default;
    /// Parses one line (without its terminator) into `out`; `Err` holds the message.
    fn line(&self, line: &str, out: &mut Self::Out) -> std::result::Result<(), String>;
}

/// True when `path` names a gzip file (by its `.gz` extension).
pub(crate) fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Opens `path` for reading; a `.gz` file must start with the gzip magic bytes and is
/// decompressed across all its members.
fn open(path: &Path) -> Result<Box<dyn Read + Send>> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    if !is_gz(path) {
        return Ok(Box::new(file));
    }
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    if got == 0 {
        // An empty .gz file holds no lines; treat it as empty text.
        return Ok(Box::new(io::empty()));
    }
    if got < 2 || magic != [0x1f, 0x8b] {
        return Err(Error::parse(path, 0, "not a gzip file (bad magic bytes)"));
    }
    let rest = io::Cursor::new(magic).chain(file);
    Ok(Box::new(MultiGzDecoder::new(rest)))
}

/// Maps a read error: decoder complaints become parse errors naming the file.
fn read_error(path: &Path, gz: bool, e: io::Error) -> Error {
    use io::ErrorKind::*;
    if gz && matches!(e.kind(), UnexpectedEof | InvalidInput | InvalidData) {
        Error::parse(path, 0, format!("truncated or corrupt gzip data: {e}"))
    } else {
        Error::io(path, e)
    }
}

/// Decompresses `path` into line-aligned blocks sent over `tx`; stops early when the
/// receiver is gone.
fn read_blocks(mut r: Box<dyn Read + Send>, path: &Path, tx: mpsc::SyncSender<Result<Vec<u8>>>) {
    let gz = is_gz(path);
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut buf = Vec::with_capacity(carry.len() + BLOCK);
        buf.append(&mut carry);
        let want = BLOCK as u64;
        let got = loop {
            match (&mut r).take(want).read_to_end(&mut buf) {
                Ok(k) => break k as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.send(Err(read_error(path, gz, e)));
                    return;
                }
            }
        };
        if got < want {
            // End of input: what is left is the last block (possibly without a final \n).
            if !buf.is_empty() {
                let _ = tx.send(Ok(buf));
            }
            return;
        }
        match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                carry.extend_from_slice(&buf[i + 1..]);
                buf.truncate(i + 1);
                if tx.send(Ok(buf)).is_err() {
                    return;
                }
            }
            // A line longer than a block: keep reading until it ends.
            None => carry = buf,
        }
    }
}

/// Splits a block into line-aligned chunks of about [`CHUNK`] bytes.
fn split_chunks(block: &[u8]) -> Vec<&[u8]> {
    let mut chunks = Vec::with_capacity(block.len() / CHUNK + 1);
    let mut start = 0;
    while start < block.len() {
        let mut end = (start + CHUNK).min(block.len());
        if end < block.len() {
            end = match block[end..].iter().position(|&b| b == b'\n') {
                Some(k) => end + k + 1,
                None => block.len(),
            };
        }
        chunks.push(&block[start..end]);
        start = end;
    }
    chunks
}

/// Parses one chunk; on failure returns the 1-based line within the chunk and the message.
fn parse_chunk<P: LineParser>(
    parser: &P,
    bytes: &[u8],
) -> std::result::Result<(P::Out, u64), (u64, String)> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64
            + 1;
        (line, "invalid UTF-8".to_string())
    })?;
    let mut out = P::Out::default();
    let mut n = 0u64;
    for line in text.split_terminator('\n') {
        n += 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        parser.line(line, &mut out).map_err(|msg| (n, msg))?;
    }
    Ok((out, n))
}

/// The first line of a block (without terminator), if it is valid UTF-8.
fn first_line(block: &[u8]) -> std::result::Result<&str, String> {
    let end = block
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(block.len());
    let line = std::str::from_utf8(&block[..end]).map_err(|_| "invalid UTF-8".to_string())?;
    Ok(line.strip_suffix('\r').unwrap_or(line))
}

/// Parses every line of `path` in parallel. `make` builds the parser from the file's first
/// line (so a parser can learn a column count); it is not called for an empty file. `sink`
/// receives chunk outputs in file order. Returns the number of lines.
pub(crate) fn parse_lines<P: LineParser>(
    path: &Path,
    make: impl FnOnce(&str) -> std::result::Result<P, String>,
    mut sink: impl FnMut(P::Out),
) -> Result<u64> {
    let reader = open(path)?;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<Result<Vec<u8>>>(1);
        s.spawn(move || read_blocks(reader, path, tx));
        let mut make = Some(make);
        let mut parser: Option<P> = None;
        let mut lines = 0u64;
        for block in rx {
            let mut block = block?;
            if let Some(make) = make.take() {
                if block.starts_with(UTF8_BOM) {
                    block.drain(..UTF8_BOM.len());
                }
                if block.starts_with(b"\xFF\xFE") || block.starts_with(b"\xFE\xFF") {
                    return Err(Error::parse(
                        path,
                        1,
                        "the file is UTF-16 (it starts with a UTF-16 byte-order mark): save it \
                         as UTF-8 or ASCII text",
                    ));
                }
                let p = first_line(&block)
                    .and_then(make)
                    .map_err(|msg| Error::parse(path, 1, msg))?;
                parser = Some(p);
            }
            let Some(p) = parser.as_ref() else {
                return Err(Error::parse(path, lines + 1, "internal: no parser"));
            };
            let results: Vec<_> = split_chunks(&block)
                .par_iter()
                .map(|chunk| parse_chunk(p, chunk))
                .collect();
            for r in results {
                match r {
                    Ok((out, n)) => {
                        sink(out);
                        lines += n;
                    }
                    Err((local, msg)) => return Err(Error::parse(path, lines + local, msg)),
                }
            }
        }
        Ok(lines)
    })
}

/// Parses a non-negative decimal integer (ASCII digits only, surrounding blanks allowed).
pub(crate) fn parse_u64(field: &str) -> std::result::Result<u64, String> {
    let f = field.trim_matches(|c| c == ' ' || c == '\t');
    if f.is_empty() {
        return Err("empty field".to_string());
    }
    let mut v: u64 = 0;
    for &b in f.as_bytes() {
        let d = b.wrapping_sub(b'0');
        if d >= 10 {
            return Err(
                if f.starts_with('-') && f[1..].bytes().all(|b| b.is_ascii_digit()) {
                    format!("negative value {f}")
                } else {
                    format!("not a non-negative integer: {:?}", short(f))
                },
            );
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(d as u64))
            .ok_or_else(|| format!("integer {} too large", short(f)))?;
    }
    Ok(v)
}

/// A node id below `num_nodes`.
pub(crate) fn parse_node_id(field: &str, num_nodes: u64) -> std::result::Result<u32, String> {
    let v = parse_u64(field).map_err(|m| format!("node id: {m}"))?;
    if v >= num_nodes {
        return Err(format!("node id {v} out of range for {num_nodes} nodes"));
    }
    Ok(v as u32)
}

/// A finite f32.
pub(crate) fn parse_f32(field: &str) -> std::result::Result<f32, String> {
    let v = match field.parse::<f32>() {
        Ok(v) => v,
        Err(_) => {
            let t = field.trim_matches(|c| c == ' ' || c == '\t');
            if t.is_empty() {
                return Err("empty field".to_string());
            }
            t.parse::<f32>()
                .map_err(|_| format!("not a number: {:?}", short(t)))?
        }
    };
    if !v.is_finite() {
        return Err(format!("non-finite value {:?}", short(field.trim())));
    }
    Ok(v)
}

/// At most 40 characters of a field, for messages.
pub(crate) fn short(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    struct Ints;
    impl LineParser for Ints {
        type Out = Vec<u64>;
        fn line(&self, line: &str, out: &mut Vec<u64>) -> std::result::Result<(), String> {
            out.push(parse_u64(line)?);
            Ok(())
        }
    }

    fn parse_all(path: &Path) -> Result<(Vec<u64>, u64)> {
        let mut all = Vec::new();
        let n = parse_lines(path, |_| Ok(Ints), |v| all.extend(v))?;
        Ok((all, n))
    }

    #[test]
    fn many_blocks_keep_order_and_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ints.txt");
        // About 40 MB: three blocks, dozens of chunks.
        let n = 4_000_000u64;
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!("{}\n", i * 7));
        }
        std::fs::write(&path, &text).unwrap();
        let (v, lines) = parse_all(&path).unwrap();
        assert_eq!(lines, n);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 7));

        // A bad value deep inside: the line number must be exact.
        let bad = 3_123_457u64;
        let text: String = (0..n)
            .map(|i| {
                if i + 1 == bad {
                    "x1\n".to_string()
                } else {
                    format!("{i}\n")
                }
            })
            .collect();
        std::fs::write(&path, &text).unwrap();
        match parse_all(&path) {
            Err(Error::Parse { line, path: p, .. }) => {
                assert_eq!(line, bad);
                assert_eq!(p, path);
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn gzip_members_and_crlf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv.gz");
        let mut bytes = Vec::new();
        for part in ["1\r\n2\n", "3\n", "4"] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(part.as_bytes()).unwrap();
            bytes.extend(e.finish().unwrap());
        }
        std::fs::write(&path, &bytes).unwrap();
        let (v, n) = parse_all(&path).unwrap();
        assert_eq!((v, n), (vec![1, 2, 3, 4], 4));
    }

    #[test]
    fn a_utf8_byte_order_mark_is_skipped_and_utf16_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bom.csv");
        std::fs::write(&path, b"\xEF\xBB\xBF7\r\n8\n").unwrap();
        assert_eq!(parse_all(&path).unwrap(), (vec![7, 8], 2));
        let gz = dir.path().join("bom.csv.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"\xEF\xBB\xBF3\n").unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        assert_eq!(parse_all(&gz).unwrap(), (vec![3], 1));
        std::fs::write(&path, b"\xFF\xFE7\x00\n\x00").unwrap();
        let err = parse_all(&path).unwrap_err().to_string();
        assert!(
            err.contains("bom.csv:1:") && err.contains("UTF-16"),
            "{err}"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(" 42 "), Ok(42));
        assert!(parse_u64("-3").unwrap_err().contains("negative"));
        assert!(parse_u64("4.5").is_err());
        assert!(parse_u64("99999999999999999999999").is_err());
        assert!(parse_node_id("7", 7).is_err());
        assert_eq!(parse_f32(" 0.25"), Ok(0.25));
        assert!(parse_f32("nan").is_err());
        assert!(parse_f32("").unwrap_err().contains("empty"));
    }
}
