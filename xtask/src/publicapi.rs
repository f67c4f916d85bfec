//! The public-API inventory: every item a user of a library crate can reach, one line each,
//! committed under `api/` (one file per crate), and the `public api` stage of
//! `cargo xtask test` that fails when the code and the inventory differ.
//!
//! Why: rverbs promises that safe code cannot cause undefined behaviour, and that promise is
//! a property of the public surface. Making the surface a committed file turns every new
//! public item — a function, a field, a `Send`/`Sync` impl, an `unsafe` dropped from a
//! signature — into a line in a diff that a reviewer sees and decides on.
//!
//! How: rustdoc's JSON output (nightly: `-Z unstable-options --output-format json`) of each
//! crate with the features users enable, walked from the crate root through public modules and
//! re-exports, reduced to one line per item with its signature. `cargo xtask public-api
//! --bless` rewrites the files; `cargo xtask public-api` (and the stage) compares.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::json::Json;
use crate::testcmd::Counts;
use crate::util;

/// (inventory file `api/<name>.txt`, package, crate name, features) whose public surface is
/// inventoried. A crate with a feature that adds public items (even hidden ones, not for
/// users) has a second inventory with that feature on, so what it adds is reviewed too.
const CRATES: &[(&str, &str, &str, &[&str])] = &[
    ("rverbs-uverbs", "rverbs-uverbs", "rverbs_uverbs", &[]),
    (
        "rverbs-uverbs+internals",
        "rverbs-uverbs",
        "rverbs_uverbs",
        &["internals"],
    ),
    ("rverbs-provider", "rverbs-provider", "rverbs_provider", &[]),
    (
        "rverbs-provider+internals",
        "rverbs-provider",
        "rverbs_provider",
        &["internals"],
    ),
    ("rverbs-cm", "rverbs-cm", "rverbs_cm", &[]),
    (
        "rverbs-cm+internals",
        "rverbs-cm",
        "rverbs_cm",
        &["internals"],
    ),
    ("rverbs-async", "rverbs-async", "rverbs_async", &[]),
    (
        "rverbs-stream",
        "rverbs-stream",
        "rverbs_stream",
        &["tokio"],
    ),
    ("rverbs", "rverbs", "rverbs", &["tokio"]),
];

/// The format versions of rustdoc's JSON this reader was written against.
const FORMAT_VERSIONS: std::ops::RangeInclusive<f64> = 57.0..=57.0;

fn api_dir() -> PathBuf {
    util::workspace_root().join("api")
}

/// `cargo xtask public-api [--bless]`.
pub fn cmd(args: &[String]) -> util::Result<u8> {
    let bless = args.iter().any(|a| a == "--bless");
    if let Some(bad) = args.iter().find(|a| *a != "--bless") {
        return Err(util::Error(format!(
            "unknown argument {bad:?} (usage: cargo xtask public-api [--bless])"
        )));
    }
    let mut failed = false;
    for (file, pkg, krate, features) in CRATES {
        match inventory(pkg, krate, features) {
            Ok(lines) => {
                let path = api_dir().join(format!("{file}.txt"));
                if bless {
                    let _ = std::fs::create_dir_all(api_dir());
                    if let Err(e) = std::fs::write(&path, render(pkg, features, &lines)) {
                        eprintln!("xtask public-api: write {}: {e}", path.display());
                        failed = true;
                    } else {
                        println!(
                            "xtask public-api: {} items ({} declared, {} impls) -> {}",
                            lines.len(),
                            declared(&lines),
                            lines.len() - declared(&lines),
                            path.display()
                        );
                    }
                } else if let Err(diff) = compare(&path, pkg, features, &lines) {
                    println!("{diff}");
                    failed = true;
                } else {
                    println!(
                        "xtask public-api: {file}: {} items ({} declared, {} impls), as committed",
                        lines.len(),
                        declared(&lines),
                        lines.len() - declared(&lines)
                    );
                }
            }
            Err(e) => {
                eprintln!("xtask public-api: {pkg}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        if !bless {
            eprintln!(
                "xtask public-api: the public surface differs from api/*.txt. If the change is \
                 intended (every public item is a promise: see docs/architecture.md, \"Why this \
                 is sound\"), run `cargo xtask public-api --bless` and commit api/."
            );
        }
        Ok(1)
    } else {
        Ok(0)
    }
}

/// The items a crate declares (types, functions, constants, fields, modules), without the
/// `impl` lines (trait implementations, auto traits included): the count the targets of the
/// public surface are stated in (docs/architecture.md, "rverbs-uverbs: the kernel ABI and the verbs objects").
fn declared(lines: &BTreeSet<String>) -> usize {
    lines
        .iter()
        .filter(|l| !l.starts_with("impl ") && !l.starts_with("unsafe impl "))
        .count()
}

/// The `public api` stage: counts one passed or failed per crate, or one skipped (with a loud
/// note) when the nightly toolchain that emits rustdoc JSON is missing.
pub fn stage() -> (Counts, Vec<String>, Duration) {
    let t = Instant::now();
    println!("xtask: ==== public api: rustdoc JSON (nightly) of each library crate vs api/*.txt");
    let mut c = Counts::default();
    let mut notes = Vec::new();
    if !nightly_rustdoc_works() {
        println!("xtask: public api: skipped: no nightly toolchain for rustdoc's JSON output");
        c.ignored = 1;
        notes.push("skipped: no nightly toolchain (rustup run nightly rustdoc)".to_string());
        return (c, notes, t.elapsed());
    }
    for (file, pkg, krate, features) in CRATES {
        let path = api_dir().join(format!("{file}.txt"));
        match inventory(pkg, krate, features).map(|l| compare(&path, pkg, features, &l)) {
            Ok(Ok(())) => c.passed += 1,
            Ok(Err(diff)) => {
                println!("{diff}");
                c.failed += 1;
                notes.push(format!(
                    "FAILED: {pkg}'s public surface differs from api/{file}.txt (reviewed change? \
                     cargo xtask public-api --bless)"
                ));
            }
            Err(e) => {
                c.failed += 1;
                notes.push(format!("FAILED: {pkg}: {e}"));
            }
        }
    }
    (c, notes, t.elapsed())
}

fn nightly_rustdoc_works() -> bool {
    Command::new("rustup")
        .args(["run", "nightly", "rustdoc", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn render(pkg: &str, features: &[&str], lines: &BTreeSet<String>) -> String {
    let mut s = format!(
        "# The public surface of {pkg} (features: {}), one item a line.\n\
         # Generated by `cargo xtask public-api --bless`; `cargo xtask test` fails when it differs.\n",
        if features.is_empty() {
            "default".to_string()
        } else {
            features.join(", ")
        }
    );
    // Grouped by the path they are about (an impl line by its type), then by the line.
    let mut v: Vec<&String> = lines.iter().collect();
    v.sort_by_key(|l| (sort_key(l), l.as_str()));
    for l in v {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// The item path a line is about: an impl line's type, else the first word with a `::`.
fn sort_key(line: &str) -> &str {
    let about = match line.find(" for ") {
        Some(i) if line.starts_with("impl") || line.starts_with("unsafe impl") => &line[i + 5..],
        _ => line,
    };
    about
        .split(|c: char| c.is_whitespace() || c == '(' || c == '<')
        .find(|w| w.contains("::"))
        .map(|w| w.trim_end_matches(':'))
        .unwrap_or(about)
}

fn compare(
    path: &Path,
    pkg: &str,
    features: &[&str],
    lines: &BTreeSet<String>,
) -> Result<(), String> {
    let want = render(pkg, features, lines);
    let have = std::fs::read_to_string(path).unwrap_or_default();
    if have == want {
        return Ok(());
    }
    let old: BTreeSet<&str> = have.lines().filter(|l| !l.starts_with('#')).collect();
    let new: BTreeSet<&str> = want.lines().filter(|l| !l.starts_with('#')).collect();
    let mut d = format!(
        "xtask public-api: {pkg}: the code differs from {}:",
        path.display()
    );
    for l in old.difference(&new) {
        d.push_str(&format!("\n  - {l}"));
    }
    for l in new.difference(&old) {
        d.push_str(&format!("\n  + {l}"));
    }
    Err(d)
}

/// Runs rustdoc's JSON output for `pkg` and reduces it to the inventory's lines.
fn inventory(pkg: &str, krate: &str, features: &[&str]) -> Result<BTreeSet<String>, String> {
    let target = util::target_dir().join("public-api");
    let mut cmd = util::nightly_cargo();
    cmd.args(["rustdoc", "-q", "-p", pkg, "--lib"])
        .env_remove("RUSTDOCFLAGS")
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(util::workspace_root());
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    // Hidden items (`#[doc(hidden)]`) are public all the same: listed too.
    cmd.args([
        "--",
        "-Z",
        "unstable-options",
        "--output-format",
        "json",
        "--document-hidden-items",
    ]);
    let st = cmd
        .status()
        .map_err(|e| format!("cannot run rustup run nightly cargo rustdoc: {e}"))?;
    if !st.success() {
        return Err(format!(
            "cargo rustdoc -p {pkg}: {}",
            util::describe_status(st)
        ));
    }
    let file = target.join("doc").join(format!("{krate}.json"));
    let text =
        std::fs::read_to_string(&file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let doc = Json::parse(&text).map_err(|e| format!("parse {}: {e}", file.display()))?;
    let v = doc.get("format_version").as_f64().unwrap_or(0.0);
    if !FORMAT_VERSIONS.contains(&v) {
        return Err(format!(
            "rustdoc JSON format version {v}; this reader knows {FORMAT_VERSIONS:?} \
             (xtask/src/publicapi.rs)"
        ));
    }
    let mut w = Walker {
        doc: &doc,
        out: BTreeSet::new(),
        seen: BTreeSet::new(),
    };
    let root = id_of(doc.get("root"));
    w.module(&root, krate);
    Ok(w.out)
}

fn id_of(j: &Json) -> String {
    match j {
        Json::Num(n) => format!("{}", *n as u64),
        Json::Str(s) => s.clone(),
        _ => String::new(),
    }
}

struct Walker<'a> {
    doc: &'a Json,
    out: BTreeSet<String>,
    /// (item id, path) pairs walked, so a module re-exported twice is listed under each path
    /// once and a cycle of glob re-exports ends.
    seen: BTreeSet<(String, String)>,
}

impl<'a> Walker<'a> {
    fn item(&self, id: &str) -> Option<&'a Json> {
        match self.doc.get("index").get(id) {
            Json::Null => None,
            j => Some(j),
        }
    }

    fn public(it: &Json) -> bool {
        // Items of a trait or of a trait impl say "default"; they are as public as the trait.
        matches!(
            it.get("visibility").as_str(),
            Some("public") | Some("default")
        )
    }

    fn module(&mut self, id: &str, path: &str) {
        if !self.seen.insert((id.to_string(), path.to_string())) {
            return;
        }
        let Some(m) = self.item(id) else { return };
        for child in m.get("inner").get("module").get("items").as_array() {
            let cid = id_of(child);
            let Some(it) = self.item(&cid) else { continue };
            if it.get("visibility").as_str() != Some("public") {
                continue;
            }
            self.named(&cid, it, path, None);
        }
    }

    /// An item found in a module (or re-exported into one, under `rename`) at `parent`.
    fn named(&mut self, id: &str, it: &'a Json, parent: &str, rename: Option<&str>) {
        let inner = it.get("inner");
        let name = rename.or(it.get("name").as_str()).unwrap_or("_");
        let path = format!("{parent}::{name}");
        let Json::Obj(kinds) = inner else { return };
        let Some((kind, body)) = kinds.iter().next() else {
            return;
        };
        match kind.as_str() {
            "module" => {
                self.out.insert(format!("mod {path}"));
                self.module(id, &path);
            }
            "use" => {
                let target = id_of(body.get("id"));
                let source = body.get("source").as_str().unwrap_or("?");
                let glob = body.get("is_glob").as_bool().unwrap_or(false);
                match self.item(&target) {
                    // A re-export of an item of this crate: listed under the new path too.
                    Some(t) if glob => {
                        if t.get("inner").get("module") != &Json::Null {
                            self.module(&target, parent);
                        }
                    }
                    Some(t) => {
                        let uname = body.get("name").as_str().unwrap_or(name);
                        self.named(&target, t, parent, Some(uname));
                    }
                    // Another crate's item: its own inventory lists what it is.
                    None => {
                        let uname = body.get("name").as_str().unwrap_or(name);
                        let star = if glob { "::*" } else { "" };
                        self.out
                            .insert(format!("pub use {parent}::{uname}{star} = {source}{star}"));
                    }
                }
            }
            "struct" | "enum" | "union" => self.adt(kind, body, it, &path),
            "trait" => {
                let uns = if body.get("is_unsafe").as_bool() == Some(true) {
                    "unsafe "
                } else {
                    ""
                };
                let g = generics(body.get("generics"));
                let bounds = bounds(body.get("bounds"));
                let b = if bounds.is_empty() {
                    String::new()
                } else {
                    format!(": {bounds}")
                };
                self.out.insert(format!("{uns}trait {path}{g}{b}"));
                for m in body.get("items").as_array() {
                    if let Some(mi) = self.item(&id_of(m)) {
                        self.member(mi, &path);
                    }
                }
            }
            "function" => {
                self.out.insert(function(body, &path));
            }
            "constant" => {
                let ty = ty(body.get("type"));
                self.out.insert(format!("const {path}: {ty}"));
            }
            "static" => {
                let ty = ty(body.get("type"));
                let m = if body.get("is_mutable").as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                };
                self.out.insert(format!("static {m}{path}: {ty}"));
            }
            "type_alias" => {
                let g = generics(body.get("generics"));
                self.out
                    .insert(format!("type {path}{g} = {}", ty(body.get("type"))));
            }
            "macro" => {
                self.out.insert(format!("macro {path}!"));
            }
            other => {
                self.out.insert(format!("{other} {path}"));
            }
        }
    }

    fn adt(&mut self, kind: &str, body: &'a Json, _it: &Json, path: &str) {
        let g = generics(body.get("generics"));
        let mut head = format!("{kind} {path}{g}");
        match kind {
            "struct" => {
                let k = body.get("kind");
                if let Json::Obj(m) = k {
                    if m.contains_key("unit") {
                        head.push(';');
                    } else if let Some(fields) = m.get("tuple") {
                        let fs: Vec<String> = fields
                            .as_array()
                            .iter()
                            .map(|f| match self.item(&id_of(f)) {
                                Some(fi) if Self::public(fi) => {
                                    format!("pub {}", ty(fi.get("inner").get("struct_field")))
                                }
                                _ => "_".to_string(),
                            })
                            .collect();
                        head.push_str(&format!("({})", fs.join(", ")));
                    } else if let Some(p) = m.get("plain") {
                        if p.get("has_stripped_fields").as_bool() == Some(true) {
                            head.push_str(" { private fields }");
                        }
                        for f in p.get("fields").as_array() {
                            if let Some(fi) = self.item(&id_of(f)) {
                                let n = fi.get("name").as_str().unwrap_or("_");
                                let t = ty(fi.get("inner").get("struct_field"));
                                self.out.insert(format!("field {path}.{n}: {t}"));
                            }
                        }
                    }
                }
            }
            "enum" => {
                if body.get("has_stripped_variants").as_bool() == Some(true) {
                    head.push_str(" { private variants }");
                }
                for v in body.get("variants").as_array() {
                    if let Some(vi) = self.item(&id_of(v)) {
                        let n = vi.get("name").as_str().unwrap_or("_");
                        self.out.insert(format!("variant {path}::{n}"));
                    }
                }
            }
            _ => {
                if body.get("has_stripped_fields").as_bool() == Some(true) {
                    head.push_str(" { private fields }");
                }
                for f in body.get("fields").as_array() {
                    if let Some(fi) = self.item(&id_of(f)) {
                        let n = fi.get("name").as_str().unwrap_or("_");
                        let t = ty(fi.get("inner").get("struct_field"));
                        self.out.insert(format!("field {path}.{n}: {t}"));
                    }
                }
            }
        }
        self.out.insert(head);
        for i in body.get("impls").as_array() {
            let Some(imp) = self.item(&id_of(i)) else {
                continue;
            };
            let ib = imp.get("inner").get("impl");
            if ib.get("blanket_impl") != &Json::Null {
                continue; // From<T> for T, Into, Any, Borrow...: the standard library's, not ours
            }
            match ib.get("trait") {
                Json::Null => {
                    for m in ib.get("items").as_array() {
                        if let Some(mi) = self.item(&id_of(m)) {
                            if mi.get("visibility").as_str() == Some("public") {
                                self.member(mi, path);
                            }
                        }
                    }
                }
                tr => {
                    let neg = if ib.get("is_negative").as_bool() == Some(true) {
                        "!"
                    } else {
                        ""
                    };
                    let uns = if ib.get("is_unsafe").as_bool() == Some(true) {
                        "unsafe "
                    } else {
                        ""
                    };
                    let tname = path_ty(tr);
                    // Of the auto traits only Send and Sync are promises about soundness;
                    // Unpin, UnwindSafe, Freeze... and derive markers would be noise.
                    let synthetic = ib.get("is_synthetic").as_bool() == Some(true);
                    // Derive internals: std's hidden `TrivialClone` impls (marked
                    // `#[doc(hidden)]`), and the hidden marker traits derives implement.
                    let hidden_impl = imp
                        .get("attrs")
                        .as_array()
                        .iter()
                        .any(|a| a.get("other").as_str() == Some("#[doc(hidden)]"));
                    if (synthetic && tname != "Send" && tname != "Sync")
                        || hidden_impl
                        || tname == "StructuralPartialEq"
                        || tname == "HasTag"
                    {
                        continue;
                    }
                    let (g, w) = generics_split(ib.get("generics"));
                    let for_ty = ty(ib.get("for"));
                    let args = for_ty.find('<').map(|i| &for_ty[i..]).unwrap_or("");
                    self.out
                        .insert(format!("{uns}impl{g} {neg}{tname} for {path}{args}{w}"));
                }
            }
        }
    }

    /// A method, associated const or type of a trait or an inherent impl.
    fn member(&mut self, mi: &Json, owner: &str) {
        let n = mi.get("name").as_str().unwrap_or("_");
        let p = format!("{owner}::{n}");
        let inner = mi.get("inner");
        if let Json::Obj(m) = inner {
            if let Some(f) = m.get("function") {
                self.out.insert(function(f, &p));
            } else if let Some(c) = m.get("assoc_const") {
                self.out.insert(format!("const {p}: {}", ty(c.get("type"))));
            } else if let Some(t) = m.get("assoc_type") {
                let b = bounds(t.get("bounds"));
                self.out.insert(format!("type {p}: {b}"));
            }
        }
    }
}

fn function(f: &Json, path: &str) -> String {
    let h = f.get("header");
    let mut pre = String::new();
    if h.get("is_const").as_bool() == Some(true) {
        pre.push_str("const ");
    }
    if h.get("is_async").as_bool() == Some(true) {
        pre.push_str("async ");
    }
    if h.get("is_unsafe").as_bool() == Some(true) {
        pre.push_str("unsafe ");
    }
    match h.get("abi") {
        Json::Str(s) if s == "Rust" => {}
        Json::Null => {}
        other => pre.push_str(&format!("extern {} ", abi(other))),
    }
    let (g, w) = generics_split(f.get("generics"));
    format!("{pre}fn {path}{g}{}{w}", sig(f.get("sig")))
}

fn abi(j: &Json) -> String {
    match j {
        Json::Str(s) => format!("{s:?}"),
        Json::Obj(m) => m
            .keys()
            .next()
            .map(|k| format!("{k:?}"))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

fn sig(s: &Json) -> String {
    let ins: Vec<String> = s
        .get("inputs")
        .as_array()
        .iter()
        .map(|p| {
            let a = p.as_array();
            let n = a.first().and_then(Json::as_str).unwrap_or("_");
            let t = a.get(1).map(ty).unwrap_or_default();
            if n == "self" {
                match t.as_str() {
                    "Self" => "self".to_string(),
                    "&Self" => "&self".to_string(),
                    "&mut Self" => "&mut self".to_string(),
                    _ => format!("self: {t}"),
                }
            } else {
                format!("{n}: {t}")
            }
        })
        .collect();
    let var = if s.get("is_c_variadic").as_bool() == Some(true) {
        ", ..."
    } else {
        ""
    };
    let out = match s.get("output") {
        Json::Null => String::new(),
        t => format!(" -> {}", ty(t)),
    };
    format!("({}{var}){out}", ins.join(", "))
}

/// `<params> where preds` as one suffix (items whose where clause may end the line).
fn generics(g: &Json) -> String {
    let (p, w) = generics_split(g);
    format!("{p}{w}")
}

/// `<params>` and ` where preds`, apart.
fn generics_split(g: &Json) -> (String, String) {
    let ps: Vec<String> = g
        .get("params")
        .as_array()
        .iter()
        .filter_map(|p| {
            let n = p.get("name").as_str().unwrap_or("_");
            let k = p.get("kind");
            if let Json::Obj(m) = k {
                if m.contains_key("lifetime") {
                    return Some(n.to_string());
                }
                if let Some(t) = m.get("type") {
                    if t.get("is_synthetic").as_bool() == Some(true) {
                        return None;
                    }
                    let b = bounds(t.get("bounds"));
                    return Some(if b.is_empty() {
                        n.to_string()
                    } else {
                        format!("{n}: {b}")
                    });
                }
                if let Some(c) = m.get("const") {
                    return Some(format!("const {n}: {}", ty(c.get("type"))));
                }
            }
            Some(n.to_string())
        })
        .collect();
    let s = if ps.is_empty() {
        String::new()
    } else {
        format!("<{}>", ps.join(", "))
    };
    let wp: Vec<String> = g
        .get("where_predicates")
        .as_array()
        .iter()
        .filter_map(|w| {
            let b = w.get("bound_predicate");
            if b == &Json::Null {
                return None;
            }
            Some(format!(
                "{}: {}",
                ty(b.get("type")),
                bounds(b.get("bounds"))
            ))
        })
        .collect();
    let w = if wp.is_empty() {
        String::new()
    } else {
        format!(" where {}", wp.join(", "))
    };
    (s, w)
}

fn bounds(b: &Json) -> String {
    b.as_array()
        .iter()
        .map(|x| {
            if let Some(l) = x.get("outlives").as_str() {
                return l.to_string();
            }
            let tb = x.get("trait_bound");
            let m = match tb.get("modifier").as_str() {
                Some("maybe") => "?",
                _ => "",
            };
            format!("{m}{}", path_ty(tb.get("trait")))
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A `Path` (trait or type path with its generic arguments).
fn path_ty(p: &Json) -> String {
    let name = p.get("path").as_str().unwrap_or("?").to_string();
    let args = p.get("args");
    if args == &Json::Null {
        return name;
    }
    if let Json::Obj(m) = args {
        if let Some(ab) = m.get("angle_bracketed") {
            let mut v: Vec<String> = ab
                .get("args")
                .as_array()
                .iter()
                .map(|a| {
                    if let Some(l) = a.get("lifetime").as_str() {
                        l.to_string()
                    } else if a.get("type") != &Json::Null {
                        ty(a.get("type"))
                    } else if a.get("const") != &Json::Null {
                        let c = a.get("const");
                        c.get("expr").as_str().unwrap_or("_").to_string()
                    } else {
                        "_".to_string()
                    }
                })
                .collect();
            for c in ab.get("constraints").as_array() {
                let n = c.get("name").as_str().unwrap_or("_");
                let b = c.get("binding");
                if b.get("equality") != &Json::Null {
                    v.push(format!("{n} = {}", ty(b.get("equality").get("type"))));
                } else {
                    v.push(format!("{n}: {}", bounds(b.get("constraint"))));
                }
            }
            if v.is_empty() {
                return name;
            }
            return format!("{name}<{}>", v.join(", "));
        }
        if let Some(pa) = m.get("parenthesized") {
            let ins: Vec<String> = pa.get("inputs").as_array().iter().map(ty).collect();
            let out = match pa.get("output") {
                Json::Null => String::new(),
                t => format!(" -> {}", ty(t)),
            };
            return format!("{name}({}){out}", ins.join(", "));
        }
    }
    name
}

fn ty(t: &Json) -> String {
    let Json::Obj(m) = t else {
        return match t.as_str() {
            Some("infer") => "_".to_string(),
            Some(s) => s.to_string(),
            None => "?".to_string(),
        };
    };
    let Some((k, v)) = m.iter().next() else {
        return "?".to_string();
    };
    match k.as_str() {
        "resolved_path" => path_ty(v),
        "generic" | "primitive" => v.as_str().unwrap_or("?").to_string(),
        "borrowed_ref" => {
            let l = v
                .get("lifetime")
                .as_str()
                .map(|l| format!("{l} "))
                .unwrap_or_default();
            let mt = if v.get("is_mutable").as_bool() == Some(true) {
                "mut "
            } else {
                ""
            };
            format!("&{l}{mt}{}", ty(v.get("type")))
        }
        "raw_pointer" => {
            let mt = if v.get("is_mutable").as_bool() == Some(true) {
                "mut"
            } else {
                "const"
            };
            format!("*{mt} {}", ty(v.get("type")))
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!(
            "[{}; {}]",
            ty(v.get("type")),
            v.get("len").as_str().unwrap_or("_")
        ),
        "tuple" => {
            let a: Vec<String> = v.as_array().iter().map(ty).collect();
            format!("({})", a.join(", "))
        }
        "dyn_trait" => {
            let mut a: Vec<String> = v
                .get("traits")
                .as_array()
                .iter()
                .map(|p| path_ty(p.get("trait")))
                .collect();
            if let Some(l) = v.get("lifetime").as_str() {
                a.push(l.to_string());
            }
            format!("dyn {}", a.join(" + "))
        }
        "impl_trait" => format!("impl {}", bounds(v)),
        "function_pointer" => {
            let h = v.get("header");
            let u = if h.get("is_unsafe").as_bool() == Some(true) {
                "unsafe "
            } else {
                ""
            };
            let a = match h.get("abi") {
                Json::Str(s) if s == "Rust" => String::new(),
                Json::Null => String::new(),
                other => format!("extern {} ", abi(other)),
            };
            format!("{u}{a}fn{}", sig(v.get("sig")))
        }
        "qualified_path" => {
            let st = ty(v.get("self_type"));
            let n = v.get("name").as_str().unwrap_or("_");
            match v.get("trait") {
                Json::Null => format!("{st}::{n}"),
                tr => format!("<{st} as {}>::{n}", path_ty(tr)),
            }
        }
        other => format!("<{other}>"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made rustdoc JSON (format 57's shape): a crate with a public module holding a
    /// struct with one public field, an unsafe method, a `Sync` impl and a private item.
    const DOC: &str = r#"{"root": 1, "format_version": 57, "index": {
      "1": {"name": "k", "visibility": "public", "inner": {"module": {"items": [2]}}},
      "2": {"name": "m", "visibility": "public", "inner": {"module": {"items": [3, 9]}}},
      "3": {"name": "S", "visibility": "public", "inner": {"struct": {
            "generics": {"params": [], "where_predicates": []},
            "kind": {"plain": {"fields": [4], "has_stripped_fields": true}},
            "impls": [5, 7]}}},
      "4": {"name": "len", "visibility": "public", "inner": {"struct_field": {"primitive": "usize"}}},
      "5": {"name": null, "visibility": "default", "inner": {"impl": {"is_unsafe": false,
            "generics": {"params": [], "where_predicates": []}, "trait": null,
            "for": {"resolved_path": {"path": "S", "id": 3, "args": null}},
            "items": [6], "is_negative": false, "is_synthetic": false, "blanket_impl": null}}},
      "6": {"name": "as_ptr", "visibility": "public", "inner": {"function": {
            "sig": {"inputs": [["self", {"borrowed_ref": {"lifetime": null, "is_mutable": false,
                    "type": {"generic": "Self"}}}]],
                    "output": {"raw_pointer": {"is_mutable": true, "type": {"primitive": "u8"}}},
                    "is_c_variadic": false},
            "generics": {"params": [], "where_predicates": []},
            "header": {"is_const": false, "is_unsafe": true, "is_async": false, "abi": "Rust"}}}},
      "7": {"name": null, "visibility": "default", "inner": {"impl": {"is_unsafe": true,
            "generics": {"params": [], "where_predicates": []},
            "trait": {"path": "Sync", "id": 8, "args": null},
            "for": {"resolved_path": {"path": "S", "id": 3, "args": null}},
            "items": [], "is_negative": false, "is_synthetic": false, "blanket_impl": null}}},
      "9": {"name": "hidden", "visibility": "crate", "inner": {"function": {}}}
    }}"#;

    #[test]
    fn reduces_rustdoc_json_to_one_line_per_public_item() {
        let doc = Json::parse(DOC).unwrap();
        let mut w = Walker {
            doc: &doc,
            out: BTreeSet::new(),
            seen: BTreeSet::new(),
        };
        w.module("1", "k");
        let got: Vec<&str> = w.out.iter().map(String::as_str).collect();
        assert_eq!(
            got,
            [
                "field k::m::S.len: usize",
                "mod k::m",
                "struct k::m::S { private fields }",
                "unsafe fn k::m::S::as_ptr(&self) -> *mut u8",
                "unsafe impl Sync for k::m::S",
            ]
        );
        let text = render("k", &[], &w.out);
        // Grouped by the item they are about: the module first, then S and its members.
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body[0], "mod k::m");
        assert!(compare(Path::new("/nonexistent"), "k", &[], &w.out).is_err());
    }
}
