//! ARCHITECTURE.md cannot drift from the code: every file it names exists (in the crate whose
//! section names it), every module of the library crates is named there, and every name in its
//! glossary's last column is in the code.

use std::path::{Path, PathBuf};

/// The crates whose every module ARCHITECTURE.md must name.
const LIBRARY_CRATES: [&str; 9] =
    ["core", "gpu", "scheduler", "store", "proto", "process", "result", "coordinator", "worker"];
/// Every crate of the workspace: a table row or an "Inside the ..." section names one.
const CRATES: [&str; 11] = [
    "core",
    "gpu",
    "scheduler",
    "store",
    "proto",
    "process",
    "result",
    "coordinator",
    "worker",
    "tests",
    "tools",
];
/// Endings of the file names the document may name.
const ENDINGS: [&str; 9] = [".rs", ".cl", ".proto", ".txt", ".tsv", ".sh", ".md", ".toml", ".html"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Every file under `dir`, as paths relative to the repository (build output and git left out).
fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files_under(root, &path, out);
            }
        } else {
            out.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// The file and folder names in a line of the document: words ending in one of [`ENDINGS`] or
/// in `/` (placeholders such as `<state>` and Rust paths with `::` are not names).
fn names_in(line: &str) -> Vec<String> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || "_./<>-".contains(c);
    line.split(|c: char| !name_char(c))
        .map(|word| word.trim_matches('.'))
        .filter(|word| !word.contains('<') && !word.contains(':'))
        .filter(|word| word.ends_with('/') || ENDINGS.iter().any(|e| word.ends_with(e)))
        .filter(|word| word.chars().any(|c| c.is_ascii_lowercase()))
        .map(str::to_owned)
        .collect()
}

/// Whether `name` (a file, or a folder ending in `/`) is the end of a path of `files` under
/// `scope` (a crate's folder; empty: anywhere).
fn names_a_file(files: &[String], scope: &str, name: &str) -> bool {
    files
        .iter()
        .filter(|f| scope.is_empty() || f.starts_with(&format!("{scope}/")))
        .map(|f| format!("/{f}"))
        .any(|f| {
            if name.ends_with('/') {
                f.contains(&format!("/{name}"))
            } else {
                f.ends_with(&format!("/{name}"))
            }
        })
}

/// Each name the document gives, with the crate of its section (empty outside the crates).
fn named_in_the_document(doc: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut named = Vec::new();
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let inside = heading.strip_prefix("Inside the ").unwrap_or("");
            section = if CRATES.contains(&inside) { inside.to_owned() } else { String::new() };
            continue;
        }
        let row = line.strip_prefix("| `").and_then(|r| r.split('`').next());
        let scope = match row {
            Some(krate) if CRATES.contains(&krate) => krate.to_owned(),
            _ => section.clone(),
        };
        named.extend(names_in(line).into_iter().map(|name| (scope.clone(), name)));
    }
    named
}

#[test]
fn every_file_architecture_md_names_exists_and_every_module_is_named_there() {
    let root = repository();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    files_under(&root, &root, &mut files);
    let named = named_in_the_document(&doc);
    assert!(named.len() > 100, "too few names found: {named:?}");
    let missing: Vec<_> =
        named.iter().filter(|(scope, name)| !names_a_file(&files, scope, name)).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names files that do not exist: {missing:?}");

    let mut unnamed = Vec::new();
    for krate in LIBRARY_CRATES {
        let mut modules = Vec::new();
        files_under(&root, &root.join(krate).join("src"), &mut modules);
        for module in modules.iter().filter(|m| m.ends_with(".rs")) {
            let file = Path::new(module).file_name().unwrap().to_string_lossy();
            let test_only = file == "tests.rs" || file.ends_with("_tests.rs");
            if test_only || file == "mod.rs" {
                continue; // a folder's module is named with the folder
            }
            let is_named = named.iter().any(|(scope, name)| {
                (scope.is_empty() || scope == krate)
                    && format!("/{module}").ends_with(&format!("/{name}"))
            });
            if !is_named {
                unnamed.push(module.clone());
            }
        }
    }
    assert!(unnamed.is_empty(), "modules that ARCHITECTURE.md does not name: {unnamed:?}");
}

#[test]
fn every_name_in_the_glossary_is_in_the_code() {
    let root = repository();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let words = doc.split("## Words").nth(1).expect("a glossary").split("\n## ").next().unwrap();
    let mut sources = String::new();
    for krate in LIBRARY_CRATES {
        let mut files = Vec::new();
        files_under(&root, &root.join(krate).join("src"), &mut files);
        for file in files.iter().filter(|f| f.ends_with(".rs")) {
            sources.push_str(&std::fs::read_to_string(root.join(file)).unwrap());
        }
    }
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let has_word = |word: &str| {
        sources.match_indices(word).any(|(at, _)| {
            let before = sources[..at].chars().next_back();
            let after = sources[at + word.len()..].chars().next();
            !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
        })
    };
    let rows: Vec<&str> =
        words.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| word")).collect();
    assert!(rows.len() >= 12, "a glossary of a dozen words: {rows:?}");
    for row in rows {
        let code = row.trim_end_matches('|').rsplit('|').next().unwrap();
        let names: Vec<&str> = code.split('`').skip(1).step_by(2).collect();
        assert!(!names.is_empty(), "a glossary word without its name in the code: {row}");
        for name in names {
            let found = if name.starts_with(char::is_uppercase) {
                ["struct", "enum", "type", "trait"].iter().any(|k| has_word(&format!("{k} {name}")))
            } else {
                has_word(name)
            };
            assert!(found, "the glossary names `{name}`, which the code does not have: {row}");
        }
    }
}
