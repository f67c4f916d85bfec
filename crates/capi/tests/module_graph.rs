//! The crate's top-level modules import each other without a circle (issue 32): `abi`,
//! `errno`, `events`, `symver` are leaves, `handle` uses `errno`, the object modules
//! (`ibverbs`, `cma`, `rsocket`) use those below them and each other in one direction.
//! Read from the sources: every `crate::NAME` (and `$crate::NAME`) outside comments and
//! outside the `#[cfg(test)]` modules is an arrow from the file's top-level module to `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The code of a file without its comment lines and its `#[cfg(test)] mod tests` block (which
/// runs to the end of the file in this crate's layout).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if !t.starts_with("//") {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module → the top-level modules it names, for `src/`. Test-only modules
/// (`*_tests.rs`) are left out: nothing but the test build uses them.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let top = |p: &Path| -> String {
        let rel = p.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| top(p))
        .filter(|m| m != "lib" && !m.ends_with("_tests"))
        .collect();
    let mut g = Graph::new();
    for p in &files {
        let from = top(p);
        if !modules.contains(&from) {
            continue;
        }
        let text = code(&std::fs::read_to_string(p).unwrap());
        let arrows = g.entry(from.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                arrows.insert(name);
            }
        }
    }
    g
}

/// A circle of `g` (its modules in order, the first repeated at the end), if it has one.
fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for n in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, n, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: reads the source tree")]
fn top_level_modules_have_no_circle() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The graph was read: the object modules name the leaves below them.
    assert!(
        g["ibverbs"].contains("abi") && g["cma"].contains("ibverbs"),
        "{g:?}"
    );
    if let Some(c) = circle(&g) {
        panic!(
            "capi's modules import in a circle: {}\n{g:?}",
            c.join(" -> ")
        );
    }
}

#[test]
fn a_circle_is_found() {
    let g: Graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .iter()
        .fold(Graph::new(), |mut g, (f, t)| {
            g.entry(f.to_string()).or_default().insert(t.to_string());
            g
        });
    assert_eq!(circle(&g).unwrap().join(" "), "a b c a");
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(circle(&acyclic), None);
    // A comment does not count; a test module at the end does not either.
    assert_eq!(
        code("// crate::x\nuse crate::y;\n#[cfg(test)]\nmod tests {\nuse crate::z;\n}\n"),
        "use crate::y;\n"
    );
}
