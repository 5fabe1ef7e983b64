//! Rooms a newcomer can read: no Rust file of the library, the command line, their tests or
//! the benchmarks over [`MAX_FILE_LINES`] lines, and no function of the library or the
//! command line over [`MAX_FN_LINES`] lines, except those in the allow-lists below, each
//! with its reason. A function's length runs from the line of its `fn` to the line of its
//! closing brace (doc comments and attributes not counted); nested functions count on their
//! own and within their parent.
//!
//! The test fails on a file or function over its limit that is not allowed, and on an
//! allow-list entry that is no longer over the limit (delete it then).

use std::path::{Path, PathBuf};

#[path = "common/lex.rs"]
mod lex;

use lex::{lex_lines, rust_files, Tok};

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 120;

/// The folders whose files are measured, from the repository root.
const FILE_ROOTS: &[&str] = &["src", "cli/src", "tests", "cli/tests", "benches"];
/// The folders whose functions are measured.
const FN_ROOTS: &[&str] = &["src", "cli/src"];

/// Files allowed over [`MAX_FILE_LINES`]: (path from the repository root, why).
const FILES_ALLOWED: &[(&str, &str)] = &[];

/// Functions allowed over [`MAX_FN_LINES`]: (file, function, why).
const FNS_ALLOWED: &[(&str, &str, &str)] = &[];

/// Each function with a body in `src`: (name, first line, lines from `fn` to its `}`).
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let t = lex_lines(src);
    let mut out = Vec::new();
    for i in 0..t.len() {
        let (Tok::Ident(kw), line) = &t[i] else {
            continue;
        };
        let Some((Tok::Ident(name), _)) = t.get(i + 1) else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        // The body is the first `{` outside the signature's parentheses and brackets; a
        // `;` first means a declaration without one (a trait's).
        let mut j = i + 2;
        let mut nest = 0i32;
        while let Some((tok, _)) = t.get(j) {
            match tok {
                Tok::Punct('(' | '[') => nest += 1,
                Tok::Punct(')' | ']') => nest -= 1,
                Tok::Punct('{' | ';') if nest == 0 => break,
                _ => {}
            }
            j += 1;
        }
        if !matches!(t.get(j), Some((Tok::Punct('{'), _))) {
            continue;
        }
        let mut depth = 0usize;
        while let Some((tok, end)) = t.get(j) {
            match tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((name.clone(), *line, end - line + 1));
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
    }
    out
}

/// The repository's root: the library's manifest folder.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `path` from the repository root, with `/` separators.
fn rel(path: &Path) -> String {
    let r = path.strip_prefix(root()).unwrap();
    r.iter()
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The files over the limit not allowed, and the allowed ones no longer over it.
fn file_report() -> Vec<String> {
    let mut over = Vec::new();
    for dir in FILE_ROOTS {
        for p in rust_files(&root().join(dir)) {
            let n = std::fs::read_to_string(&p).unwrap().lines().count();
            if n > MAX_FILE_LINES {
                over.push((rel(&p), n));
            }
        }
    }
    let mut report = Vec::new();
    for (f, n) in &over {
        if !FILES_ALLOWED.iter().any(|(a, _)| a == f) {
            report.push(format!("{f}: {n} lines (at most {MAX_FILE_LINES})"));
        }
    }
    for (a, _) in FILES_ALLOWED {
        if !over.iter().any(|(f, _)| f == a) {
            report.push(format!(
                "stale FILES_ALLOWED entry: {a} is {MAX_FILE_LINES} lines or fewer; delete it"
            ));
        }
    }
    report
}

/// The functions over the limit not allowed, and the allowed ones no longer over it.
fn fn_report() -> Vec<String> {
    let mut over = Vec::new();
    for dir in FN_ROOTS {
        for p in rust_files(&root().join(dir)) {
            let src = std::fs::read_to_string(&p).unwrap();
            for (name, line, n) in functions(&src) {
                if n > MAX_FN_LINES {
                    over.push((rel(&p), name, line, n));
                }
            }
        }
    }
    let mut report = Vec::new();
    for (f, name, line, n) in &over {
        if !FNS_ALLOWED.iter().any(|(a, g, _)| a == f && g == name) {
            report.push(format!(
                "{f}:{line} fn {name}: {n} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    for (a, g, _) in FNS_ALLOWED {
        if !over.iter().any(|(f, name, ..)| f == a && name == g) {
            report.push(format!(
                "stale FNS_ALLOWED entry: {a} fn {g} is {MAX_FN_LINES} lines or fewer; delete it"
            ));
        }
    }
    report
}

#[test]
fn no_file_over_800_lines_outside_the_allow_list() {
    let report = file_report();
    assert!(report.is_empty(), "files too long:\n{}", report.join("\n"));
}

#[test]
fn no_function_over_120_lines_in_src_or_cli_outside_the_allow_list() {
    let report = fn_report();
    assert!(
        report.is_empty(),
        "functions too long (split them into named steps):\n{}",
        report.join("\n")
    );
}

#[test]
fn function_lengths_skip_braces_in_strings_comments_and_declarations() {
    let src = "trait T {\n    fn decl(&self) -> u8;\n}\n\
               pub(crate) fn outer<F: Fn(u8) -> u8>(f: F) -> [u8; 2] {\n\
               \x20   let s = \"}}}\"; // }\n\
               \x20   fn inner() {}\n\
               \x20   /* { */\n\
               \x20   [f(1), b'}']\n\
               }\n";
    assert_eq!(
        functions(src),
        vec![("outer".to_string(), 4, 6), ("inner".to_string(), 6, 1)]
    );
}
