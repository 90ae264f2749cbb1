//! The engine's modules import one another in the order `lib.rs` writes
//! down, top to bottom only: no import circle, and none that climbs — for
//! the crate's top-level modules (its "Layers" section) and for the modules
//! inside `runtime/` (its "Layers inside `runtime/`" section).
//!
//! The same count as `../shared/tools/layers.py`: every module path a file
//! names — `crate::a::b`, `super::b`, `self::b`, each item of a `use`
//! group, paths written inline in code — is resolved to an absolute one; a
//! reference from a file under child A of the folder to anything under
//! child B is an edge A -> B. Comments and test code are left out: files
//! named `tests.rs` or under a `tests/` folder, and each `#[cfg(test)]`
//! item (the item alone, matched by its braces — not the rest of its
//! file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers a `lib.rs` section documents, top first: the first words of
/// each line of the text block under `heading` that name modules
/// (`job/`, `error.rs`, …); a line naming several puts them on one layer.
fn documented_layers(heading: &str) -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let section = lib
        .split(&format!("//! {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("lib.rs has a section `{heading}`"));
    let block = section
        .split("//! ```text")
        .nth(1)
        .expect("with a text block")
        .split("//! ```")
        .next()
        .unwrap();
    let mut layers = Vec::new();
    for line in block.lines() {
        let text = line.trim_start_matches("//!");
        // Continuation lines are indented past the names.
        if text.starts_with("  ") || text.trim().is_empty() {
            continue;
        }
        let names: Vec<String> = text
            .split_whitespace()
            .take_while(|w| w.ends_with('/') || w.ends_with(".rs"))
            .map(|w| w.trim_end_matches('/').trim_end_matches(".rs").to_string())
            .collect();
        if !names.is_empty() {
            layers.push(names);
        }
    }
    layers
}

/// The text with its comments blanked (a `//` cuts its line; `/* */`
/// spans go).
fn strip_comments(t: &str) -> String {
    let mut no_blocks = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(i) = rest.find("/*") {
        no_blocks.push_str(&rest[..i]);
        match rest[i + 2..].find("*/") {
            Some(j) => rest = &rest[i + 2 + j + 2..],
            None => rest = "",
        }
        no_blocks.push(' ');
    }
    no_blocks.push_str(rest);
    no_blocks
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text without its `#[cfg(test)]` items: each up to its matching
/// closing brace, or its `;`.
fn strip_test_items(t: &str) -> String {
    const TAG: &str = "#[cfg(test)]";
    let mut t = t.to_string();
    while let Some(i) = t.find(TAG) {
        let j = i + TAG.len();
        let semi = t[j..].find(';').map(|k| k + j);
        let brace = t[j..].find('{').map(|k| k + j);
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = t.len();
                for (k, c) in t[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => t.len(),
        };
        t.replace_range(i..end, "");
    }
    t
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The path segments after an anchor at `text[at..]`: `::a::b` → (["a",
/// "b"], the rest), stopping at a `{` group (returned as its inside).
fn segments(text: &str) -> (Vec<String>, Option<String>) {
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let r = rest.trim_start();
        let Some(r) = r.strip_prefix("::") else {
            return (segs, None);
        };
        let r = r.trim_start();
        if let Some(inner) = r.strip_prefix('{') {
            let mut depth = 1;
            let mut end = inner.len();
            for (k, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            return (segs, Some(inner[..end].to_string()));
        }
        let n = r.find(|c: char| !is_ident_char(c)).unwrap_or(r.len());
        if n == 0 {
            return (segs, None);
        }
        segs.push(r[..n].to_string());
        rest = &r[n..];
    }
}

/// A group's top-level items: `a::{b, c}, d` → [`a::{b, c}`, `d`].
fn split_group(g: &str) -> Vec<String> {
    let (mut items, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in g.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            items.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        items.push(cur.trim().to_string());
    }
    items
}

/// Every `(anchor, segments)` path in `text`; a group yields one path
/// per item.
fn paths_in(text: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    for anchor in ["crate", "super", "self"] {
        for (i, _) in text.match_indices(anchor) {
            let before = text[..i].chars().next_back();
            let after = text[i + anchor.len()..].chars().next();
            if before.is_some_and(is_ident_char) || after.is_some_and(is_ident_char) {
                continue;
            }
            let (head, group) = segments(&text[i + anchor.len()..]);
            match group {
                None => out.push((anchor, head)),
                Some(g) => {
                    for item in split_group(&g) {
                        let item = item.split('{').next().unwrap_or("");
                        let mut segs = head.clone();
                        segs.extend(
                            item.split("::")
                                .map(str::trim)
                                .filter(|s| !s.is_empty() && s.chars().all(is_ident_char))
                                .map(String::from),
                        );
                        out.push((anchor, segs));
                    }
                }
            }
        }
    }
    out
}

/// The module path of file `f` (relative to the crate's `src`).
fn module_path(f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// An absolute module path for `anchor::segs` named in module `module`.
fn resolve(anchor: &str, segs: &[String], module: &[String]) -> Vec<String> {
    let mut out: Vec<String> = match anchor {
        "crate" => Vec::new(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        _ => module.to_vec(),
    };
    for s in segs {
        if s == "super" {
            out.pop();
        } else {
            out.push(s.clone());
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The modules directly inside `folder` (`""`: the crate's top level).
fn children(folder: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(src().join(folder)).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if ["lib", "main", "mod", "tests"].contains(&name.as_str()) {
            continue;
        }
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            out.insert(name);
        }
    }
    out
}

/// Per module directly inside `folder`: the sibling modules it refers to,
/// with the files that do.
fn edges(folder: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let prefix: Vec<String> = folder
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let modules = children(folder);
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for m in &modules {
        let base = src().join(folder);
        let mut files = Vec::new();
        if base.join(m).is_dir() {
            rust_files(&base.join(m), &mut files);
        }
        let file = base.join(format!("{m}.rs"));
        if file.is_file() {
            files.push(file);
        }
        for f in files {
            let text = strip_test_items(&strip_comments(&std::fs::read_to_string(&f).unwrap()));
            let module = module_path(&f);
            for (anchor, segs) in paths_in(&text) {
                let full = resolve(anchor, &segs, &module);
                if full.len() > prefix.len() && full[..prefix.len()] == prefix[..] {
                    let d = &full[prefix.len()];
                    if modules.contains(d) && d != m {
                        edges
                            .entry(m.clone())
                            .or_default()
                            .entry(d.clone())
                            .or_default()
                            .insert(f.strip_prefix(src()).unwrap().display().to_string());
                    }
                }
            }
        }
    }
    edges
}

/// Every module of `folder` is on one of `layers`, and imports only
/// modules on layers below its own.
fn check(folder: &str, layers: &[Vec<String>]) {
    let level: BTreeMap<String, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.clone(), i)))
        .collect();
    let modules = children(folder);
    let undocumented: Vec<_> = modules.iter().filter(|m| !level.contains_key(*m)).collect();
    assert!(
        undocumented.is_empty(),
        "modules of `{folder}` missing from lib.rs's layers: {undocumented:?} (layers read: {layers:?})"
    );
    let mut climbing = Vec::new();
    for (from, tos) in edges(folder) {
        for (to, files) in tos {
            if level[&to] <= level[&from] {
                climbing.push(format!("{from} -> {to} ({files:?})"));
            }
        }
    }
    assert!(
        climbing.is_empty(),
        "imports in `{folder}` that do not go down lib.rs's layers:\n{}",
        climbing.join("\n")
    );
}

#[test]
fn top_level_modules_import_only_the_layers_below_them() {
    check("", &documented_layers("## Layers"));
}

#[test]
fn runtime_modules_import_only_the_layers_below_them() {
    check("runtime", &documented_layers("## Layers inside `runtime/`"));
}

#[test]
fn the_import_scan_sees_grouped_super_and_inline_references() {
    // The scanner itself, on the runtime (which imports from many layers
    // both ways): it must see standby (`crate::standby::…`) and checkpoint.
    let e = edges("");
    let runtime = &e["runtime"];
    assert!(runtime.contains_key("standby") && runtime.contains_key("checkpoint"));
    assert!(
        !runtime.contains_key("job"),
        "the runtime never imports the builder"
    );
    assert!(e["job"].contains_key("runtime"));
    // Inside the runtime: `super::` paths and groups.
    let r = edges("runtime");
    assert!(r["worker"].contains_key("task") && r["standby"].contains_key("worker"));
    let paths = paths_in("use super::{a::X, b};\nfn f() { crate::c::d(); self::e::f }");
    assert!(paths.contains(&("super", vec!["a".into(), "X".into()])));
    assert!(paths.contains(&("super", vec!["b".into()])));
    assert!(paths.contains(&("crate", vec!["c".into(), "d".into()])));
    assert!(paths.contains(&("self", vec!["e".into(), "f".into()])));
}

#[test]
fn only_the_test_items_themselves_are_left_out() {
    // A test module early in a file hides nothing after it.
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::job;\n    fn f() { if x { } }\n}\n#[cfg(test)]\nuse crate::c;\nfn g() { crate::standby::x(); }\n";
    let kept = strip_test_items(&strip_comments(text));
    let named: Vec<String> = paths_in(&kept)
        .into_iter()
        .map(|(_, s)| s[0].clone())
        .collect();
    assert_eq!(
        named,
        vec!["a".to_string(), "standby".to_string()],
        "{kept}"
    );
    // Comments name nothing.
    assert!(paths_in(&strip_comments("// crate::job\n/* crate::x */ fn f() {}")).is_empty());
}
