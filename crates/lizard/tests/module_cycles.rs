//! Inside every workspace crate, sibling modules form no cycle, at every depth: if `a` (or anything
//! below it) names `b`, nothing in `b` (or below it) names `a`, directly or through other siblings.
//! The crate's top-level modules are siblings, and so are the children of one module
//! (`sandbox::child` and `sandbox::rootfs`). A child module may use its parent and a parent its
//! children; siblings and cousins point one way. No server, no root: it reads the sources.
//!
//! What counts as "names": a `crate::…`, `super::…` or `self::…` path anywhere in the code of a
//! module's file, `{a, b::c}` groups included, outside comments and outside the `#[cfg(test)]`
//! modules (tests may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source file without its `#[cfg(test)]` modules and its comment lines.
fn code(src: &str) -> String {
    let mut out = String::new();
    let mut lines = src.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.ends_with('{'))
        {
            // Skip the module: to the closing brace at the indentation it opened with.
            let open = lines.next().unwrap();
            let indent = open.len() - open.trim_start().len();
            let close = format!("{}}}", " ".repeat(indent));
            for l in lines.by_ref() {
                if l == close {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The module paths `code`, in the module `at` (e.g. `["sandbox", "child"]`), names: `crate::…`,
/// `super::…` (repeatable) and `self::…` paths resolved to paths from the crate's root, `{a, b::c}`
/// groups included (each item a path of its own).
fn named_paths(code: &str, at: &[String]) -> BTreeSet<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ident = |s: &str| -> String { s.chars().take_while(|c| is_ident(*c)).collect() };
    // The path that starts `rest` (after a prefix), as segments; groups expand into several.
    fn tail(rest: &str, base: Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut end = group.len();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            let group = &group[..end];
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices().chain([(group.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tail(group[start..i.min(group.len())].trim(), base.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if name.is_empty() || name == "self" {
            out.insert(base);
            return;
        }
        let mut path = base;
        path.push(name.clone());
        match rest[name.len()..].strip_prefix("::") {
            Some(more) => tail(more, path, out),
            None => {
                out.insert(path);
            }
        }
    }
    let mut out = BTreeSet::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(prefix) {
            // `lizard_crate::x` is another crate's path; `super::super::` is read from its first.
            let before = &code[..i];
            if before.ends_with(is_ident) || before.ends_with("::") {
                continue;
            }
            let mut base: Vec<String> = match prefix {
                "crate::" => Vec::new(),
                "self::" => at.to_vec(),
                _ => at[..at.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[i + prefix.len()..];
            if prefix == "super::" {
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            if ident(rest) == "crate" {
                continue;
            }
            tail(rest, base, &mut out);
        }
    }
    out
}

/// Every module of the crate whose `src` is `src`: its path from the crate's root and the code of
/// its own file (`src/bin`, other crates' roots, left out).
fn modules(src: &Path) -> BTreeMap<Vec<String>, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        if rel.starts_with("bin") {
            continue;
        }
        let mut path: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        out.insert(path, code(&std::fs::read_to_string(&f).unwrap()));
    }
    out
}

/// For each module with child modules, the graph of its children: which sibling each one (with
/// everything under it) names. The crate's top-level modules are the root's children.
fn graphs(
    mods: &BTreeMap<Vec<String>, String>,
) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for m in mods.keys().filter(|m| !m.is_empty()) {
        let (name, parent) = m.split_last().unwrap();
        out.entry(parent.to_vec())
            .or_default()
            .insert(name.clone(), BTreeSet::new());
    }
    for (at, code) in mods {
        for named in named_paths(code, at) {
            // Every ancestor level at which `at` and `named` part ways is an edge between siblings.
            let common = at.iter().zip(&named).take_while(|(a, b)| a == b).count();
            let (Some(from), Some(to)) = (at.get(common), named.get(common)) else {
                continue;
            };
            let parent = at[..common].to_vec();
            if let Some(g) = out.get_mut(&parent) {
                if g.contains_key(to) {
                    g.entry(from.clone()).or_default().insert(to.clone());
                }
            }
        }
    }
    out
}

/// The strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut found = Vec::new();
    let mut crates = 0;
    for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let mods = modules(&src);
        for (parent, g) in graphs(&mods) {
            for comp in cycles(&g) {
                let mut why = Vec::new();
                for a in &comp {
                    for b in g[a].iter().filter(|b| comp.contains(b)) {
                        why.push(format!("    {a} -> {b}"));
                    }
                }
                found.push(format!(
                    "{} in `crate::{}`: {}\n{}",
                    e.file_name().to_string_lossy(),
                    parent.join("::"),
                    comp.join(", "),
                    why.join("\n")
                ));
            }
        }
    }
    assert!(crates >= 10, "read only {crates} crates");
    assert!(
        found.is_empty(),
        "module cycles (move what both sides need below both, or make one a child of the other):\n{}",
        found.join("\n")
    );
}

/// The checker itself resolves `crate::`, `super::` and `self::` paths and groups, ignores
/// comments, tests and other crates' paths, and finds cycles between siblings at any depth.
#[test]
fn the_checker_finds_a_cycle_and_ignores_comments_and_tests() {
    let at = ["sandbox", "child"].map(String::from);
    let src = "use crate::{b, c::X};\nuse super::rootfs::{self, Plan};\nuse super::super::d;\n\
               use self::inner::Y;\n// crate::e\nfn f() { other_crate::e(); }\n\
               #[cfg(test)]\nmod tests {\n    use crate::e;\n}\n";
    let path = |p: &str| p.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        named_paths(&code(src), &at),
        [
            "b",
            "c::X",
            "sandbox::rootfs",
            "sandbox::rootfs::Plan",
            "d",
            "sandbox::child::inner::Y"
        ]
        .map(path)
        .into_iter()
        .collect()
    );
    let mods: BTreeMap<Vec<String>, String> = [
        ("sandbox", "use self::child::run;"),
        ("sandbox::child", "use super::rootfs;"),
        ("sandbox::rootfs", "use crate::sandbox::child::SetupError;"),
        ("sys", "use crate::sandbox::rootfs::Plan;"),
    ]
    .into_iter()
    .map(|(p, c)| (path(p), c.to_string()))
    .collect();
    let g = graphs(&mods);
    assert_eq!(cycles(&g[&path("sandbox")]), vec![vec!["child", "rootfs"]]);
    assert!(cycles(&g[&Vec::new()]).is_empty());
    assert_eq!(g[&Vec::new()]["sys"], ["sandbox".to_string()].into());
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
    let mut dag = g.clone();
    dag.get_mut("c").unwrap().clear();
    assert!(cycles(&dag).is_empty());
}
