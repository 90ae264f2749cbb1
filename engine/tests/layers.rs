//! The engine's top-level modules import one another in the order
//! `lib.rs` writes down (its "Layers" section), top to bottom only: no
//! import circle, and none that climbs.
//!
//! The same count as `../shared/tools/layers.py`: every `crate::NAME`
//! (and every name in a `use crate::{…}` group) in a module's files, outside
//! comments and outside the test modules at the end of a file, is an edge
//! from that module to `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers `lib.rs` documents, top first: the first word of each line
/// of the text block under "## Layers" that names modules (`job/`,
/// `error.rs`, …); a line naming several puts them on one layer.
fn documented_layers() -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let section = lib
        .split("//! ## Layers")
        .nth(1)
        .expect("lib.rs has a Layers section");
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module names each module's files refer to.
fn edges(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for m in modules {
        let dir = src().join(m);
        let mut files = Vec::new();
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(src().join(format!("{m}.rs")));
        }
        for f in files {
            let mut text = std::fs::read_to_string(&f).unwrap();
            if let Some(cut) = text.find("#[cfg(test)]") {
                text.truncate(cut);
            }
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let mut named = BTreeSet::new();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or("");
                    for item in group.split(',') {
                        if let Some((head, _)) = item.trim().split_once("::") {
                            named.insert(head.to_string());
                        }
                    }
                } else {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    named.insert(name);
                }
            }
            let file = f.strip_prefix(src()).unwrap().display().to_string();
            for n in named {
                if modules.contains(&n) && n != *m {
                    edges
                        .entry(m.clone())
                        .or_default()
                        .entry(n)
                        .or_default()
                        .insert(file.clone());
                }
            }
        }
    }
    edges
}

#[test]
fn top_level_modules_import_only_the_layers_below_them() {
    let layers = documented_layers();
    let level: BTreeMap<String, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.clone(), i)))
        .collect();
    let mut modules = BTreeSet::new();
    for e in std::fs::read_dir(src()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            modules.insert(name);
        }
    }
    let undocumented: Vec<_> = modules.iter().filter(|m| !level.contains_key(*m)).collect();
    assert!(
        undocumented.is_empty(),
        "modules missing from lib.rs's Layers: {undocumented:?} (layers read: {layers:?})"
    );
    let mut climbing = Vec::new();
    for (from, tos) in edges(&modules) {
        for (to, files) in tos {
            if level[&to] <= level[&from] {
                climbing.push(format!("{from} -> {to} ({files:?})"));
            }
        }
    }
    assert!(
        climbing.is_empty(),
        "imports that do not go down lib.rs's layers:\n{}",
        climbing.join("\n")
    );
}

#[test]
fn the_import_scan_sees_single_and_grouped_references() {
    // The scanner itself, on the runtime (which imports from many layers
    // both ways): it must see standby (`crate::standby::…`) and checkpoint.
    let modules: BTreeSet<String> = ["runtime", "standby", "checkpoint", "job"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let e = edges(&modules);
    let runtime = &e["runtime"];
    assert!(runtime.contains_key("standby") && runtime.contains_key("checkpoint"));
    assert!(
        !runtime.contains_key("job"),
        "the runtime never imports the builder"
    );
    assert!(e["job"].contains_key("runtime"));
}
