//! Inside every workspace crate, the top-level modules form no cycle: if `a` names `crate::b::…`,
//! nothing in `b` (or below it) names `crate::a::…`, directly or through other modules. A child
//! module may use its parent (`super::`); siblings and cousins point one way. No server, no root: it
//! reads the sources.
//!
//! What counts as "names": a `crate::m` path anywhere in the code of a module's files (its own file
//! and everything under its directory), `use crate::{m, …}` groups included, outside comments and
//! outside the `#[cfg(test)]` modules (tests may reach anywhere).

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

/// The modules `code` names as `crate::m` (single paths and `crate::{a, b::c}` groups).
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        // `lizard_crate::x` is another crate's path, not ours.
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// Each top-level module of the crate whose `src` is `src`, with the code of all its files.
fn modules(src: &Path) -> BTreeMap<String, Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out: BTreeMap<String, Vec<(PathBuf, String)>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        if rel.components().count() == 1 && matches!(name.as_str(), "lib" | "main") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        out.entry(name).or_default().push((f.clone(), code(&text)));
    }
    out
}

/// The module graph: for each module, the other modules of the same crate it names.
fn graph(mods: &BTreeMap<String, Vec<(PathBuf, String)>>) -> BTreeMap<String, BTreeSet<String>> {
    mods.iter()
        .map(|(m, files)| {
            let deps = files
                .iter()
                .flat_map(|(_, c)| named_modules(c))
                .filter(|d| d != m && mods.contains_key(d))
                .collect();
            (m.clone(), deps)
        })
        .collect()
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
        let g = graph(&mods);
        for comp in cycles(&g) {
            let mut why = Vec::new();
            for a in &comp {
                for b in g[a].iter().filter(|b| comp.contains(b)) {
                    // Where `a` names `b` first.
                    let at = mods[a]
                        .iter()
                        .find(|(_, c)| named_modules(c).contains(b))
                        .map(|(f, _)| f.strip_prefix(root()).unwrap().display().to_string())
                        .unwrap_or_default();
                    why.push(format!("    {a} -> {b} (in {at})"));
                }
            }
            found.push(format!(
                "{}: {}\n{}",
                e.file_name().to_string_lossy(),
                comp.join(", "),
                why.join("\n")
            ));
        }
    }
    assert!(crates >= 10, "read only {crates} crates");
    assert!(
        found.is_empty(),
        "module cycles (move what both sides need below both, or make one a child of the other):\n{}",
        found.join("\n")
    );
}

/// The checker itself finds a cycle, through a `use crate::{…}` group and a path, and ignores
/// comments, tests and other crates' paths.
#[test]
fn the_checker_finds_a_cycle_and_ignores_comments_and_tests() {
    let src = "use crate::{b, c::X};\n// crate::d\nfn f() { other_crate::d(); }\n\
               #[cfg(test)]\nmod tests {\n    use crate::d;\n}\n";
    assert_eq!(
        named_modules(&code(src)),
        ["b", "c"].map(String::from).into_iter().collect()
    );
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
