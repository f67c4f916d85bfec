//! The floors of this crate and the import graph between its modules, read from the sources.
//!
//! The crate is built in floors, each importing only from the floors below it:
//!
//! 0. `kernel::*`: the kernel layer (raw ABI, ioctl and write() framing, mappings, shared-memory
//!    copies, the data path's lock, fd helpers): imports nothing above it.
//! 1. `values`: the value types (operation kinds, access flags, QP types/states/capacities,
//!    address vectors, MTUs, driver ids): a leaf over the kernel layer.
//! 2. `error`, `wr`, `wc`, `op`: the vocabulary of posting and completing (errors, work
//!    requests, completions, the operation table).
//! 3. `driver`: the provider seam, which speaks the vocabulary but no object.
//! 4. everything else: devices and the verbs objects.
//!
//! And across all modules the import graph has no cycle. The last one, `ledger` → `mr` → `pd`
//! → `ledger` (a PD keeps the registry of its regions, a region keeps its PD alive), was broken
//! by moving the region type beside the PD (`pd/region.rs`) and the raw memory parts into
//! `values`: the ledger is generic over what it holds and imports no object, which
//! [`the_module_graph_has_no_cycle`] also checks, so that the cycle cannot come back by the
//! ledger's side either.
//!
//! An arrow `a -> b` is any `crate::b` path in module `a`'s code outside comments and outside
//! its unit tests (`#[cfg(test)] mod tests`, `tests.rs` files). A module is a top-level file or
//! directory of `src/`; the kernel layer's modules count one by one (`kernel::abi`, ...).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floor of a module (see the crate doc of this test); objects are the top floor.
fn floor(module: &str) -> u8 {
    match module {
        m if m.starts_with("kernel::") => 0,
        "newtype" | "util" => 0,
        "values" => 1,
        "error" | "wr" | "wc" | "op" => 2,
        "driver" => 3,
        _ => 4,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to, or None for the crate root and the test-only files.
fn module_of(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.last()?;
    if last == "tests" || last.ends_with("_tests") || parts == ["lib"] || parts == ["fuzzing"] {
        return None;
    }
    if parts[0] == "kernel" {
        return Some(match parts.get(1) {
            Some(m) if m != "mod" => format!("kernel::{m}"),
            _ => "kernel::mod".to_string(),
        });
    }
    Some(parts[0].clone())
}

/// The modules a file's code names with `crate::` paths.
fn imports(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name == "kernel" {
                let sub: String = rest["kernel".len()..]
                    .strip_prefix("::")
                    .unwrap_or("")
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert(format!("kernel::{sub}"));
            } else {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut texts = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap().to_path_buf();
        if let Some(m) = module_of(&rel) {
            edges.entry(m.clone()).or_default();
            texts.push((m, std::fs::read_to_string(&file).unwrap()));
        }
    }
    for (m, text) in texts {
        let known: BTreeSet<String> = edges.keys().cloned().collect();
        let targets = edges.get_mut(&m).unwrap();
        for t in imports(&text) {
            // Macros (`crate::raw_newtype`) and the crate root's re-exports are no module.
            if t != m && known.contains(&t) {
                targets.insert(t);
            }
        }
    }
    edges
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.edges[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                scc.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: reads the source tree")]
fn each_module_imports_only_from_its_floor_and_below() {
    let edges = graph();
    assert!(edges.contains_key("kernel::abi") && edges.contains_key("values"));
    let mut wrong = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if floor(b) > floor(a) {
                wrong.push(format!(
                    "{a} (floor {}) imports {b} (floor {})",
                    floor(a),
                    floor(b)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up a floor:\n{}",
        wrong.join("\n")
    );
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: reads the source tree")]
fn the_module_graph_has_no_cycle() {
    let edges = graph();
    let found: Vec<String> = cycles(&edges)
        .iter()
        .map(|c| c.iter().cloned().collect::<Vec<_>>().join(" <-> "))
        .collect();
    assert!(
        found.is_empty(),
        "import cycles between the modules of rverbs-uverbs (the modules of each cycle):\n{}",
        found.join("\n")
    );
    // The bookkeeping of what posted requests hold sits below the objects: generic over what
    // it holds (the PD's `Region`, a test's stand-in), it names no PD, region or queue, so the
    // ledger -> mr -> pd -> ledger cycle cannot come back through a default type parameter.
    let objects: Vec<&String> = edges["ledger"].iter().filter(|m| floor(m) > 2).collect();
    assert!(
        objects.is_empty(),
        "the ledger imports objects: {objects:?}"
    );
    assert!(edges["pd"].contains("ledger") && edges["mr"].contains("pd"));
}

#[test]
fn the_reader_sees_arrows_and_cycles() {
    // The reader itself: a path in code is an arrow, one in a comment or a unit test is not,
    // and a two-module loop is a cycle.
    let text = "use crate::qp::QpType;\n// crate::cq\nfn f() { crate::kernel::abi::x(); }\n\
                #[cfg(test)]\nmod tests {\n    use crate::mr::Mr;\n}\n";
    let got: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(got, ["kernel::abi", "qp"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], BTreeSet::from(["a".to_string(), "b".to_string()]));
}
