//! Reading the code itself, for the tests that do (import cycles, file and function
//! sizes): the Rust files under a folder, and a small lexer of Rust source (identifiers,
//! `::` and punctuation, with comments, strings, chars and lifetimes removed).
#![allow(dead_code)] // each test binary that includes it uses part of it

use std::path::{Path, PathBuf};

/// Every `.rs` file under `root`, sorted.
pub fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tok {
    Ident(String),
    Punct(char),
    PathSep,
}

/// Tokens of Rust source with comments, strings, chars and lifetimes removed.
pub fn lex(src: &str) -> Vec<Tok> {
    lex_lines(src).into_iter().map(|(t, _)| t).collect()
}

/// [`lex`] with the line (from 1) each token starts on.
pub fn lex_lines(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut line_of = Vec::with_capacity(c.len());
    let mut line = 1;
    for &ch in &c {
        line_of.push(line);
        line += usize::from(ch == '\n');
    }
    let (mut i, mut out) = (0, Vec::new());
    let ident_start = |ch: char| ch.is_alphabetic() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied().unwrap_or(' ');
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(&c, i + 1, 0);
        } else if ch == '\'' {
            if next == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1; // a lifetime: its name lexes as an identifier nobody looks up
            }
        } else if ident_start(ch) {
            let s = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[s..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "b" | "c" | "cr");
            if raw && i < c.len() && (c[i] == '"' || c[i] == '#') {
                let mut hashes = 0;
                while i < c.len() && c[i] == '#' {
                    hashes += 1;
                    i += 1;
                }
                if i < c.len() && c[i] == '"' {
                    i = skip_string(&c, i + 1, hashes);
                    continue;
                }
            }
            if word == "b" && i < c.len() && c[i] == '\'' {
                continue; // b'x': the quote lexes as a char literal next
            }
            out.push((Tok::Ident(word), line_of[s]));
        } else if ch == ':' && next == ':' {
            out.push((Tok::PathSep, line_of[i]));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line_of[i]));
            i += 1;
        }
    }
    out
}

/// The index after a string literal whose opening quote ends at `i`; `hashes` > 0 for raw.
fn skip_string(c: &[char], mut i: usize, hashes: usize) -> usize {
    while i < c.len() {
        if hashes == 0 && c[i] == '\\' {
            i += 2;
        } else if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
            return i + 1 + hashes;
        } else {
            i += 1;
        }
    }
    i
}
