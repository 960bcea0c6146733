//! The crate's top-level modules import one another in one direction only: no module
//! imports one that imports it back, directly or through others. A circle means two layers
//! know each other, so neither can be read (or changed) without the other.
//!
//! Reads `src/` as text: a module's files are `src/NAME.rs` and everything under
//! `src/NAME/`; an import is any `crate::NAME` path outside a comment, `crate::{NAME, ..}`
//! groups included.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of the library (the binary's `cli` and `main` are not in it).
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs");
    lib.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))
                .or_else(|| line.strip_prefix("pub(crate) mod "))?;
            Some(rest.trim_end_matches(';').trim().to_owned())
        })
        .collect()
}

fn rust_files(module: &str, src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The names `text` reaches as `crate::NAME` or inside `crate::{...}` (first level).
fn crate_paths(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        if start > 0 && (is_ident(bytes[start - 1]) || bytes[start - 1] == b'$') {
            continue;
        }
        if bytes.get(from) == Some(&b'{') {
            let mut depth = 0usize;
            let mut name = String::new();
            let mut at_name_start = true;
            for &b in &bytes[from..] {
                match b {
                    b'{' => {
                        depth += 1;
                        at_name_start = depth == 1;
                        continue;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => {
                        at_name_start = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 && at_name_start {
                    if is_ident(b) {
                        name.push(b as char);
                        continue;
                    }
                    if b.is_ascii_whitespace() && name.is_empty() {
                        continue;
                    }
                    if !name.is_empty() {
                        names.push(std::mem::take(&mut name));
                    }
                    at_name_start = false;
                }
            }
            if !name.is_empty() {
                names.push(name);
            }
        } else {
            let name: String = bytes[from..]
                .iter()
                .take_while(|b| is_ident(**b))
                .map(|&b| b as char)
                .collect();
            names.push(name);
        }
    }
    names
}

/// Which top-level module imports which others, with a file that does it.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let modules = top_level_modules(src);
    let mut graph = BTreeMap::new();
    for module in &modules {
        let mut edges = BTreeMap::new();
        for file in rust_files(module, src) {
            let text = fs::read_to_string(&file).expect("read a source file");
            let code: String = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .map(|line| line.split(" // ").next().unwrap_or(line))
                .collect::<Vec<_>>()
                .join("\n");
            for name in crate_paths(&code) {
                if modules.contains(&name) && &name != module {
                    edges
                        .entry(name)
                        .or_insert_with(|| file.strip_prefix(src).unwrap_or(&file).to_owned());
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// A shortest way back from `to` to `from`, if any: `[to, ..., from]`.
fn path_back(
    graph: &BTreeMap<String, BTreeMap<String, PathBuf>>,
    to: &str,
    from: &str,
) -> Option<Vec<String>> {
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([to]);
    let mut seen = BTreeSet::from([to]);
    while let Some(at) = queue.pop_front() {
        if at == from {
            let mut path = vec![from.to_owned()];
            let mut step = from;
            while step != to {
                step = previous[step];
                path.push(step.to_owned());
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.get(at).into_iter().flat_map(|edges| edges.keys()) {
            if seen.insert(next.as_str()) {
                previous.insert(next.as_str(), at);
                queue.push_back(next.as_str());
            }
        }
    }
    None
}

/// Every circle, each named once: `a -> b -> ... -> a`, with the file of each import.
fn circles(graph: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Vec<String> {
    let mut found = BTreeSet::new();
    for (module, edges) in graph {
        for to in edges.keys() {
            let Some(back) = path_back(graph, to, module) else {
                continue;
            };
            let mut circle = vec![module.clone()];
            circle.extend(back);
            // The same circle seen from each of its modules: keep the rotation that starts
            // at the smallest name.
            let ring = &circle[..circle.len() - 1];
            let start = (0..ring.len()).min_by_key(|&i| &ring[i]).unwrap_or(0);
            let rotated: Vec<&String> = ring[start..].iter().chain(&ring[..start]).collect();
            let mut text = String::new();
            for (i, from) in rotated.iter().enumerate() {
                let to = rotated[(i + 1) % rotated.len()];
                text.push_str(&format!(
                    "{from} -> {to} ({}); ",
                    graph[*from][to].display()
                ));
            }
            found.insert(text);
        }
    }
    found.into_iter().collect()
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(
        graph.len() > 10,
        "too few modules found in {}",
        src.display()
    );
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "import circles between top-level modules:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_and_plain_imports() {
    let text = "use crate::{auth::Auth, config::{A, B}, reply};\nlet x = crate::policy::P;\n\
                let y = $crate::ignored; notcrate::nope;";
    assert_eq!(crate_paths(text), ["auth", "config", "reply", "policy"]);
    let graph = BTreeMap::from([
        (
            "a".to_owned(),
            BTreeMap::from([("b".to_owned(), PathBuf::from("a.rs"))]),
        ),
        (
            "b".to_owned(),
            BTreeMap::from([("c".to_owned(), PathBuf::from("b.rs"))]),
        ),
        (
            "c".to_owned(),
            BTreeMap::from([("a".to_owned(), PathBuf::from("c.rs"))]),
        ),
        (
            "d".to_owned(),
            BTreeMap::from([("a".to_owned(), PathBuf::from("d.rs"))]),
        ),
    ]);
    assert_eq!(
        circles(&graph),
        ["a -> b (a.rs); b -> c (b.rs); c -> a (c.rs); "]
    );
}
