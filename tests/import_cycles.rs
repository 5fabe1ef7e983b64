//! No import cycles between the files of `src/`, nor between its modules (each top-level
//! file or folder of `src/`: `device/`, `train/`, `error.rs`, ...); the same for the
//! command line's crate, `cli/src/` (`espalier_cli` and its binary, `main.rs`).
//!
//! A file depends on another when it names one of that file's items through the crate's own
//! module paths: `use crate::..`, `use super::..`, `use self::..`, relative `use child::..`,
//! fully qualified `crate::x::y` / `super::x` paths in code, and paths through a module
//! alias brought in by `use` (`use crate::ops;` then `ops::fill(..)`). A path is followed
//! through `pub use` re-exports to the file that defines the item, and a `pub use` itself is
//! a dependency only for the names the file's own code uses, so a `mod.rs` that re-exports
//! its children is not a cycle with them. `#[cfg(test)]` modules are skipped: a
//! unit test may reach anywhere. The command line (`cli/`, the espalier-cli package) is
//! its own crate and reaches the library as `espalier::..`: another crate's paths, which
//! cannot make a cycle with it, so its scan follows only its own (`crate::..`, `super::..`,
//! and `espalier_cli::..` from its binary).
//!
//! The test fails on any cycle not in [`ALLOWED`], and on any [`ALLOWED`] edge that no longer
//! exists (delete it then), printing the edges of each cycle with the path that makes each.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "common/lex.rs"]
mod lex;

use lex::{lex, rust_files, Tok};

/// Edges a known cycle still needs, as (from, to) files under `src/`. Each entry says which
/// change removes it; delete the entry when that change lands (the test fails on a stale one).
const ALLOWED: &[(&str, &str)] = &[
    // Kept on purpose (issue 17, item 3): a `Tensor` owns its autograd `Node` (`grad_fn`)
    // and a `Node` owns tensors (its leaf parents, the tensors its backward rule saved,
    // the gradients it takes and returns): one recursive data structure. Splitting it
    // would take a trait object in `tensor.rs` that autograd downcasts, or merging the
    // two files, which hide the recursion without removing it. Neither file imports ops
    // any more: `fill` is the device buffers', and autograd sums gradients with the
    // device layer's `device/add.rs`.
    ("tensor.rs", "autograd.rs"),
];

/// Edges a known cycle between the files of `cli/src/` still needs, as in [`ALLOWED`].
const ALLOWED_CLI: &[(&str, &str)] = &[];

/// Edges a known cycle between the top-level modules of `cli/src/` still needs, as in
/// [`ALLOWED`].
const ALLOWED_CLI_MODULES: &[(&str, &str)] = &[];

/// Edges a known cycle between the top-level modules of `src/` still needs, as (from, to)
/// module names; each entry says why, as in [`ALLOWED`].
const ALLOWED_MODULES: &[(&str, &str)] = &[
    // The recursion between a tensor and its autograd node ([`ALLOWED`]).
    ("tensor", "autograd"),
];

/// A module: which crate (`lib` or `bin`) and its path from the crate root.
type Module = (&'static str, Vec<String>);

/// One path a file names, with the module it is named from.
struct Named {
    from: Vec<String>,
    path: Vec<String>,
    /// `use ..::*` (the target is the module itself).
    glob: bool,
}

/// One leaf of a `use` item.
struct Use {
    /// The module it is written in.
    scope: Vec<String>,
    path: Vec<String>,
    /// `use ..::*`.
    glob: bool,
    /// The name it brings in.
    alias: String,
    /// `pub` or `pub(..)`: a re-export.
    public: bool,
    /// In the file's own module (not an inline one).
    own: bool,
}

#[derive(Default)]
struct FileInfo {
    module: Vec<String>,
    krate: &'static str,
    /// Paths from `use` items.
    uses: Vec<Use>,
    /// `ident::ident..` paths in code.
    code: Vec<Named>,
    /// Names of the file's top-level items.
    defines: BTreeSet<String>,
    /// Identifiers its (non-test) code uses outside `use` items.
    idents: BTreeSet<String>,
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Parses a use tree at `i` with `prefix` already read; returns (path, glob, alias) leaves.
fn use_tree(
    t: &[Tok],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, bool, String)>,
) {
    let mut path = prefix;
    loop {
        match t.get(*i) {
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Ident(s)) if s != "as" => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, true, String::new()));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while !matches!(t.get(*i), Some(Tok::Punct('}')) | None) {
                    use_tree(t, i, path.clone(), out);
                    if t.get(*i) == Some(&Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => break,
        }
    }
    let mut alias = path.last().cloned().unwrap_or_default();
    if ident(t.get(*i)) == Some("as") {
        alias = ident(t.get(*i + 1)).unwrap_or("_").to_string();
        *i += 2;
    }
    if alias == "self" {
        path.pop();
        alias = path.last().cloned().unwrap_or_default();
    }
    out.push((path, false, alias));
}

fn scan(file: &mut FileInfo, src: &str) {
    let t = lex(src);
    // Inline modules open at a brace depth: (name, depth, is a test module).
    let mut stack: Vec<(String, usize, bool)> = Vec::new();
    let (mut depth, mut i, mut cfg_test) = (0usize, 0usize, false);
    while i < t.len() {
        let in_test = stack.iter().any(|s| s.2);
        let scope: Vec<String> = file
            .module
            .iter()
            .cloned()
            .chain(stack.iter().map(|s| s.0.clone()))
            .collect();
        let top = stack.is_empty() && depth == 0;
        match &t[i] {
            Tok::Punct('#') if t.get(i + 1) == Some(&Tok::Punct('[')) => {
                let attr: Vec<&Tok> = t[i..].iter().take(6).collect();
                let is = |k: usize, s: &str| matches!(attr.get(k), Some(Tok::Ident(x)) if x == s);
                if is(2, "cfg") && is(4, "test") && attr.get(5) == Some(&&Tok::Punct(')')) {
                    cfg_test = true;
                }
                i += 1;
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if stack.last().is_some_and(|s| s.1 == depth) {
                    stack.pop();
                }
                i += 1;
            }
            Tok::Ident(k) if k == "mod" => {
                let name = ident(t.get(i + 1)).unwrap_or("").to_string();
                if t.get(i + 2) == Some(&Tok::Punct('{')) {
                    stack.push((name.clone(), depth, cfg_test || in_test));
                    depth += 1;
                    i += 3;
                } else {
                    i += 2;
                }
                if top {
                    file.defines.insert(name);
                }
                cfg_test = false;
            }
            Tok::Ident(k) if k == "use" => {
                let public = i > 0 && matches!(t[..i].last(), Some(Tok::Ident(p)) if p == "pub")
                    || i > 3 && t.get(i - 1) == Some(&Tok::Punct(')')) && {
                        let p = t[..i].iter().rposition(|x| *x == Tok::Punct('('));
                        p.is_some_and(|p| p > 0 && t[p - 1] == Tok::Ident("pub".into()))
                    };
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&t, &mut i, Vec::new(), &mut leaves);
                if !in_test && !cfg_test {
                    for (path, glob, alias) in leaves {
                        file.uses.push(Use {
                            scope: scope.clone(),
                            path,
                            glob,
                            alias,
                            public,
                            own: stack.is_empty(),
                        });
                    }
                }
                cfg_test = false;
            }
            Tok::Ident(k) => {
                let kinds = [
                    "fn", "struct", "enum", "trait", "type", "const", "static", "union",
                ];
                if top && kinds.contains(&k.as_str()) {
                    if let Some(name) = ident(t.get(i + 1)) {
                        file.defines.insert(name.to_string());
                    }
                }
                let after_sep = i > 0 && t[i - 1] == Tok::PathSep;
                let after_dollar = i > 0 && t[i - 1] == Tok::Punct('$');
                if !in_test && !cfg_test {
                    file.idents.insert(k.clone());
                }
                if t.get(i + 1) == Some(&Tok::PathSep) && !after_sep && !after_dollar {
                    let mut path = vec![k.clone()];
                    let mut j = i + 1;
                    while t.get(j) == Some(&Tok::PathSep) {
                        match ident(t.get(j + 1)) {
                            Some(s) => path.push(s.to_string()),
                            None => break,
                        }
                        j += 2;
                    }
                    if !in_test && !cfg_test {
                        file.code.push(Named {
                            from: scope,
                            path,
                            glob: false,
                        });
                    }
                    i = j;
                    continue;
                }
                if !matches!(k.as_str(), "pub" | "crate" | "super" | "in" | "self") {
                    cfg_test = cfg_test && k != "fn" && k != "impl";
                }
                i += 1;
            }
            Tok::Punct(';') => {
                cfg_test = false;
                i += 1;
            }
            _ => i += 1,
        }
    }
}

struct Crate {
    files: BTreeMap<PathBuf, FileInfo>,
    by_module: BTreeMap<Module, PathBuf>,
    /// The library's name, as a `main.rs` beside its `lib.rs` reaches it.
    lib_name: &'static str,
}

impl Crate {
    /// The files under `src` of a package whose library is `lib_name` and whose binary,
    /// if any, is `src/main.rs`.
    fn load(src: &Path, lib_name: &'static str) -> Crate {
        let mut files = BTreeMap::new();
        for p in rust_files(src) {
            let rel = p.strip_prefix(src).unwrap().to_path_buf();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let bin = rel == Path::new("main.rs");
            let mut info = FileInfo {
                module,
                krate: if bin { "bin" } else { "lib" },
                ..FileInfo::default()
            };
            scan(&mut info, &std::fs::read_to_string(&p).unwrap());
            files.insert(rel, info);
        }
        let by_module = files
            .iter()
            .map(|(p, f)| ((f.krate, f.module.clone()), p.clone()))
            .collect();
        Crate {
            files,
            by_module,
            lib_name,
        }
    }

    /// The crate and absolute path `path` names from module `from`, or `None` for another
    /// crate's path or a local item.
    fn absolute(
        &self,
        krate: &'static str,
        from: &[String],
        path: &[String],
        aliases: &BTreeMap<String, Module>,
    ) -> Option<Module> {
        let first = path.first()?.as_str();
        let rest = || path[1..].to_vec();
        match first {
            "crate" => Some((krate, rest())),
            name if krate == "bin" && name == self.lib_name => Some(("lib", rest())),
            "self" => Some((krate, from.iter().cloned().chain(rest()).collect())),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let base = &from[..from.len().checked_sub(ups)?];
                Some((
                    krate,
                    base.iter()
                        .cloned()
                        .chain(path[ups..].iter().cloned())
                        .collect(),
                ))
            }
            _ => {
                let mut child = from.to_vec();
                child.push(first.to_string());
                if self.by_module.contains_key(&(krate, child.clone())) {
                    Some((krate, child.into_iter().chain(rest()).collect()))
                } else {
                    let (k, base) = aliases.get(first)?;
                    Some((k, base.iter().cloned().chain(rest()).collect()))
                }
            }
        }
    }

    /// The file defining the item at `path`, following re-exports; `None` when the path is
    /// exactly a module (an alias, not a use of its items).
    fn resolve(&self, (krate, path): &Module, hops: usize) -> Option<PathBuf> {
        let n = (0..=path.len())
            .rev()
            .find(|&n| self.by_module.contains_key(&(*krate, path[..n].to_vec())))?;
        let file = &self.by_module[&(*krate, path[..n].to_vec())];
        if n == path.len() {
            return None;
        }
        if hops < 8 {
            let info = &self.files[file];
            let name = &path[n];
            for u in &info.uses {
                if !u.public || !u.own {
                    continue;
                }
                let aliases = BTreeMap::new();
                let Some(abs) = self.absolute(info.krate, &u.scope, &u.path, &aliases) else {
                    continue;
                };
                let hit = if u.glob {
                    self.by_module
                        .get(&abs)
                        .is_some_and(|f| self.files[f].defines.contains(name))
                } else {
                    &u.alias == name
                };
                if hit {
                    let mut next = abs.1.clone();
                    next.extend(path[n + usize::from(!u.glob)..].iter().cloned());
                    return self
                        .resolve(&(abs.0, next), hops + 1)
                        .or(Some(file.clone()));
                }
            }
        }
        Some(file.clone())
    }

    /// Every (from, to) file edge with one path that makes it.
    fn edges(&self) -> BTreeMap<(PathBuf, PathBuf), String> {
        let mut edges = BTreeMap::new();
        for (file, info) in &self.files {
            let mut aliases = BTreeMap::new();
            for u in info.uses.iter().filter(|u| !u.glob) {
                if let Some(abs) = self.absolute(info.krate, &u.scope, &u.path, &BTreeMap::new()) {
                    aliases.insert(u.alias.clone(), abs);
                }
            }
            // A `pub use` is an alias table, not a dependency: whoever names an item
            // through it is sent on to the file that defines the item. It is one only for
            // the names the file's own code uses.
            let uses = info.uses.iter();
            let named = uses
                .filter(|u| !u.public || info.idents.contains(&u.alias))
                .map(|u| Named {
                    from: u.scope.clone(),
                    path: u.path.clone(),
                    glob: u.glob,
                });
            for n in named.chain(info.code.iter().map(|n| Named {
                from: n.from.clone(),
                path: n.path.clone(),
                glob: n.glob,
            })) {
                let Some(abs) = self.absolute(info.krate, &n.from, &n.path, &aliases) else {
                    continue;
                };
                let target = if n.glob {
                    self.by_module.get(&abs).cloned()
                } else {
                    self.resolve(&abs, 0)
                };
                if let Some(to) = target.filter(|to| to != file) {
                    let why = n.path.join("::") + if n.glob { "::*" } else { "" };
                    edges.entry((file.clone(), to)).or_insert(why);
                }
            }
        }
        edges
    }
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeSet<(PathBuf, PathBuf)>) -> Vec<Vec<PathBuf>> {
    let mut adj: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (a, b) in edges {
        adj.entry(a).or_default().push(b);
        adj.entry(b).or_default();
    }
    let nodes: Vec<&PathBuf> = adj.keys().copied().collect();
    let idx: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // Iterative DFS: (node, next neighbour to visit).
        let mut call = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on[root] = true;
        while let Some(&mut (v, ref mut k)) = call.last_mut() {
            let succ = &adj[nodes[v]];
            if *k < succ.len() {
                let w = idx[succ[*k]];
                *k += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on[w] = true;
                    call.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on[w] = false;
                        comp.push(nodes[w].clone());
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        comp.sort();
                        out.push(comp);
                    }
                }
            }
        }
    }
    out
}

/// The cycles among `edges` that do not pass through an `allowed` edge, and the allowed
/// edges that no longer exist (named `list` in the report), as a report; empty if none.
fn report(
    edges: &BTreeMap<(PathBuf, PathBuf), String>,
    allowed: &[(&str, &str)],
    list: &str,
) -> String {
    let allowed: BTreeSet<(PathBuf, PathBuf)> = allowed
        .iter()
        .map(|(a, b)| (PathBuf::from(a), PathBuf::from(b)))
        .collect();
    let stale: Vec<_> = allowed.iter().filter(|e| !edges.contains_key(*e)).collect();
    let kept: BTreeSet<_> = edges
        .keys()
        .filter(|e| !allowed.contains(*e))
        .cloned()
        .collect();
    let mut report = String::new();
    for comp in cycles(&kept) {
        report += "cycle:\n";
        for ((a, b), why) in edges {
            if comp.contains(a) && comp.contains(b) && kept.contains(&(a.clone(), b.clone())) {
                report += &format!("  {} -> {}  ({why})\n", a.display(), b.display());
            }
        }
    }
    for (a, b) in &stale {
        report += &format!(
            "stale {list} entry: {} no longer imports from {}; delete it\n",
            a.display(),
            b.display()
        );
    }
    report
}

#[test]
fn src_has_no_import_cycle_outside_the_allow_list() {
    let report = report(&library().edges(), ALLOWED, "ALLOWED");
    assert!(report.is_empty(), "import cycles in src/:\n{report}");
}

/// The library's files.
fn library() -> Crate {
    Crate::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "espalier",
    )
}

/// The command line's files (the library `espalier_cli` and the binary `main.rs`).
fn command_line() -> Crate {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("cli/src");
    Crate::load(&src, "espalier_cli")
}

#[test]
fn cli_has_no_import_cycle_outside_the_allow_list() {
    let edges = command_line().edges();
    // Not an empty scan: the binary reaches its library, the library its commands.
    for (from, to) in [("main.rs", "lib.rs"), ("lib.rs", "train.rs")] {
        let e = (PathBuf::from(from), PathBuf::from(to));
        assert!(
            edges.contains_key(&e),
            "no edge {from} -> {to} in {edges:?}"
        );
    }
    let report = report(&edges, ALLOWED_CLI, "ALLOWED_CLI");
    assert!(report.is_empty(), "import cycles in cli/src/:\n{report}");
}

#[test]
fn cli_modules_have_no_import_cycle_outside_the_allow_list() {
    let edges = module_edges(&command_line().edges());
    let report = report(&edges, ALLOWED_CLI_MODULES, "ALLOWED_CLI_MODULES");
    assert!(
        report.is_empty(),
        "import cycles between the modules of cli/src/:\n{report}"
    );
}

#[test]
fn the_binary_reaches_its_library_by_name_and_another_crate_not_at_all() {
    let dir = std::env::temp_dir().join(format!("espalier-cycles-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(dir.join("main.rs"), "fn main() { app::a::run(); }\n").unwrap();
    // `espalier::b` is the other crate's `b`, not this one's.
    std::fs::write(dir.join("a.rs"), "pub fn run() { espalier::b::go(); }\n").unwrap();
    std::fs::write(dir.join("b.rs"), "pub fn go() { crate::a::run(); }\n").unwrap();
    let edges = Crate::load(&dir, "app").edges();
    std::fs::remove_dir_all(&dir).unwrap();
    let keys: Vec<_> = edges.keys().cloned().collect();
    let p = PathBuf::from;
    assert_eq!(
        keys,
        vec![(p("b.rs"), p("a.rs")), (p("main.rs"), p("a.rs"))],
        "{edges:?}"
    );
}

#[test]
fn the_cycle_check_sees_a_cycle_through_super_and_a_module_alias() {
    let dir = std::env::temp_dir().join(format!("espalier-cycles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "mod x;\npub use x::X;\npub const C: u8 = 0;\n// crate::b::y in a comment\nconst S: &str = \"crate::b::y\";\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/x.rs"),
        "use crate::b;\npub struct X;\nfn f() { b::y(); }\n#[cfg(test)]\nmod tests { use crate::b::y; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.rs"),
        "pub fn y() { let _ = super::a::X; }\n#[cfg(test)]\nmod tests { use crate::a::C; }\n",
    )
    .unwrap();
    let edges = Crate::load(&dir, "espalier").edges();
    std::fs::remove_dir_all(&dir).unwrap();
    let keys: BTreeSet<_> = edges.keys().cloned().collect();
    let found = cycles(&keys);
    assert_eq!(
        found,
        vec![vec![PathBuf::from("a/x.rs"), PathBuf::from("b.rs")]],
        "{edges:?}"
    );
}

/// The top-level module of a file under a crate's `src/`: its first path component
/// without `.rs`.
fn top_module(file: &Path) -> PathBuf {
    let first = file
        .components()
        .next()
        .expect("a path under a crate's src/");
    let name = first.as_os_str().to_string_lossy();
    PathBuf::from(name.strip_suffix(".rs").unwrap_or(&name))
}

/// The file edges between different top-level modules, as module edges with one path
/// that makes each.
fn module_edges(
    edges: &BTreeMap<(PathBuf, PathBuf), String>,
) -> BTreeMap<(PathBuf, PathBuf), String> {
    let mut out = BTreeMap::new();
    for ((a, b), why) in edges {
        let (ma, mb) = (top_module(a), top_module(b));
        if ma != mb && ma != Path::new("lib") && ma != Path::new("main") {
            out.entry((ma, mb))
                .or_insert_with(|| format!("{} -> {}: {why}", a.display(), b.display()));
        }
    }
    out
}

#[test]
fn src_modules_have_no_import_cycle_outside_the_allow_list() {
    let edges = module_edges(&library().edges());
    let report = report(&edges, ALLOWED_MODULES, "ALLOWED_MODULES");
    assert!(
        report.is_empty(),
        "import cycles between the modules of src/:\n{report}"
    );
}

#[test]
fn the_module_check_sees_a_cycle_that_no_two_files_make() {
    // a/x.rs -> b.rs and b.rs -> a/y.rs: no file cycle, one module cycle.
    let dir = std::env::temp_dir().join(format!("espalier-mod-cycles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(dir.join("a/mod.rs"), "pub mod x;\npub mod y;\n").unwrap();
    std::fs::write(dir.join("a/x.rs"), "use crate::b::B;\npub struct X(B);\n").unwrap();
    std::fs::write(dir.join("a/y.rs"), "pub struct Y;\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::y::Y;\npub struct B(Y);\n").unwrap();
    let file_edges = Crate::load(&dir, "espalier").edges();
    std::fs::remove_dir_all(&dir).unwrap();
    let files: BTreeSet<_> = file_edges.keys().cloned().collect();
    assert!(cycles(&files).is_empty(), "{file_edges:?}");
    let modules: BTreeSet<_> = module_edges(&file_edges).keys().cloned().collect();
    assert_eq!(
        cycles(&modules),
        vec![vec![PathBuf::from("a"), PathBuf::from("b")]]
    );
}
