//! ARCHITECTURE.md cannot drift from the code: every file it names exists (in the crate whose
//! section names it), every module of the library crates is named there, every name in its
//! glossary's last column is in the code, every code name it writes is in the code (see
//! [`code_name`] for what counts as one; a name only in a comment is not in the code), every
//! entry of a crate's layout is where the layout puts it, and every thread the coordinator starts
//! is named in code and in its thread map.

use std::path::{Path, PathBuf};

/// The crates whose every module ARCHITECTURE.md must name: the libraries and the command line.
const LIBRARY_CRATES: [&str; 11] = [
    "core",
    "gpu",
    "scheduler",
    "store",
    "proto",
    "process",
    "result",
    "coordinator",
    "cli",
    "worker",
    "test-support",
];
/// The workspace's other crates: with [`LIBRARY_CRATES`], every crate (a table row or an
/// "Inside the ..." section names one).
const OTHER_CRATES: [&str; 2] = ["tests", "tools"];

/// The crate named `name`, if it is one of the workspace's.
fn workspace_crate(name: &str) -> Option<&'static str> {
    LIBRARY_CRATES.iter().chain(&OTHER_CRATES).find(|c| **c == name).copied()
}

/// Endings of the file names the document may name.
const ENDINGS: [&str; 10] =
    [".rs", ".cl", ".proto", ".txt", ".tsv", ".sh", ".py", ".md", ".toml", ".html"];

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
            section = workspace_crate(inside).unwrap_or_default().to_owned();
            continue;
        }
        let row = line.strip_prefix("| `").and_then(|r| r.split('`').next());
        let scope = match row {
            Some(krate) if workspace_crate(krate).is_some() => krate.to_owned(),
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
            sources.push_str(&without_comments(&std::fs::read_to_string(root.join(file)).unwrap()));
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

/// The endings of the files whose text the document's code names are looked up in: every
/// crate's sources, the page and kernel they embed, and the manifests (lint names, features and
/// binaries are named in `Cargo.toml`).
const SOURCE_ENDINGS: [&str; 6] = [".rs", ".proto", ".html", ".cl", ".toml", ".sh"];

/// This file: left out of the sources, whose names its broken copies must not find.
const THIS_FILE: &str = "tests/tests/e2e/docs.rs";

/// The text of every source of the repository (see [`SOURCE_ENDINGS`]), but for [`THIS_FILE`],
/// with the comments of those in [`C_STYLE_ENDINGS`] left out, and the set of its identifiers.
struct Sources {
    text: String,
    identifiers: std::collections::HashSet<String>,
}

impl Sources {
    fn read(root: &Path, files: &[String]) -> Sources {
        let mut text = String::new();
        let is_source = |f: &&String| SOURCE_ENDINGS.iter().any(|e| f.ends_with(e));
        for file in files.iter().filter(is_source).filter(|f| *f != THIS_FILE) {
            let source = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            if C_STYLE_ENDINGS.iter().any(|e| file.ends_with(e)) {
                text.push_str(&without_comments(&source));
            } else {
                text.push_str(&source);
            }
            text.push('\n');
        }
        Sources::of(text)
    }

    fn of(text: String) -> Sources {
        let identifiers = text.split(|c: char| !is_name_char(c)).map(str::to_owned).collect();
        Sources { text, identifiers }
    }

    /// Whether `word` is in the sources as a whole word: neither side touches a letter, a digit
    /// or `_`.
    fn has_word(&self, word: &str) -> bool {
        if word.chars().all(is_name_char) {
            return self.identifiers.contains(word);
        }
        self.text.match_indices(word).any(|(at, _)| {
            let before = self.text[..at].chars().next_back();
            let after = self.text[at + word.len()..].chars().next();
            !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
        })
    }
}

/// The endings of the sources whose comments are `//`, `///`, `//!` and `/* */`: their names
/// are looked up in their code only.
const C_STYLE_ENDINGS: [&str; 3] = [".rs", ".proto", ".cl"];

/// `text` without its comments: line comments (`//`, `///`, `//!`) are cut to the end of their
/// line and block comments (`/* */`, nested as Rust nests them) become a space, so that a name
/// found only in a comment is not in the code. The insides of strings (a URL's `//`), raw strings and char
/// literals are code and stay.
fn without_comments(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let end = match (c[i], c.get(i + 1)) {
            ('/', Some('/')) => {
                i = c[i..].iter().position(|&x| x == '\n').map_or(c.len(), |n| i + n);
                continue;
            }
            ('/', Some('*')) => {
                i = block_comment_end(&c, i);
                out.push(' ');
                continue;
            }
            ('"', _) => quoted_end(&c, i),
            ('\'', _) => char_literal_end(&c, i),
            ('r', _) => raw_string_end(&c, i),
            _ => i + 1,
        };
        out.extend(&c[i..end]);
        i = end;
    }
    out
}

/// Where the block comment that starts at `i` (at its `/*`) ends, nested comments included.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < c.len() {
        match (c[i], c.get(i + 1)) {
            ('/', Some('*')) => (depth, i) = (depth + 1, i + 2),
            ('*', Some('/')) => {
                (depth, i) = (depth - 1, i + 2);
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    c.len()
}

/// Where the string that starts at `i` (at its `"`) ends, past its closing quote.
fn quoted_end(c: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < c.len() {
        match c[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    c.len()
}

/// Where a char literal that starts at `i` (at its `'`) ends; a lifetime (`'a`) is one
/// character.
fn char_literal_end(c: &[char], i: usize) -> usize {
    if c.get(i + 1) == Some(&'\\') {
        let close = c.iter().skip(i + 3).position(|&x| x == '\'');
        return close.map_or(c.len(), |n| i + 3 + n + 1);
    }
    if c.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

/// Where a raw string (`r"..."`, `r#"..."#`, `br"..."`) that starts at `i` (at its `r`) ends;
/// `i + 1` where no raw string starts there (an `r` in a word).
fn raw_string_end(c: &[char], i: usize) -> usize {
    let before = |k: usize| i.checked_sub(k).map(|at| c[at]);
    let starts_word = !before(1).is_some_and(is_name_char)
        || (before(1) == Some('b') && !before(2).is_some_and(is_name_char));
    let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
    if !starts_word || c.get(i + 1 + hashes) != Some(&'"') {
        return i + 1;
    }
    let body = i + 2 + hashes;
    let closing = |j: &usize| c[*j] == '"' && c[j + 1..].iter().take(hashes).all(|&x| x == '#');
    let close = (body..c.len()).find(|j| closing(j) && j + hashes < c.len());
    close.map_or(c.len(), |j| j + 1 + hashes)
}

/// The document with its code fences (three backticks) left out, so that the backticks of the
/// spans inside a block pair up.
fn without_fences(doc: &str) -> String {
    doc.lines().filter(|l| !l.trim_start().starts_with("```")).collect::<Vec<_>>().join("\n")
}

/// The code name a span in backticks gives, if it gives one:
///
/// - a span with a space is a command line (`serve --n 18`), one starting with `-` a flag:
///   neither is a code name;
/// - a type's generic arguments are left out (`Reply<T>` names `Reply`); a path with a
///   placeholder (`<state>.result.json`) is no code name (the file check reads it);
/// - anything else is one: a file or folder (ending in one of [`ENDINGS`] or `/`), or names
///   joined by `::` (`Scheduler::lease_checked`), `.` (`RegisterRequest.slots`), `/`
///   (`/status.json`) or `=` (`NQ_ADVERSARY_TRACE=1`), with a macro's `!` (`cpu_features!`); environment
///   variables (`NQ_KNOWN_COUNTS`), crate names and features are names like any other.
fn code_name(span: &str) -> Option<&str> {
    if span.is_empty() || span.contains(char::is_whitespace) || span.starts_with('-') {
        return None;
    }
    match span.split_once('<') {
        None => Some(span),
        Some((head, _)) if !head.is_empty() && head.chars().all(is_name_char) => Some(head),
        Some(_) => None,
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The words of a code block's text that are code names although no backticks mark them:
/// CamelCase words (a lowercase letter followed by an uppercase one: `JobTable`), and words with
/// `_` or `::` (`lease_checked`, `JobTable::set_state`).
fn unmarked_code_names(block_line: &str) -> Vec<&str> {
    block_line
        .split(|c: char| !is_name_char(c) && c != ':')
        .map(|word| word.trim_matches(':'))
        .filter(|word| {
            let camel = word
                .as_bytes()
                .windows(2)
                .any(|p| p[0].is_ascii_lowercase() && p[1].is_ascii_uppercase());
            camel || word.contains('_') || word.contains("::")
        })
        .collect()
}

/// Every code name of the document: the spans in backticks that are code names (see
/// [`code_name`]), in its prose and its code blocks, and the words of its code blocks that
/// [`unmarked_code_names`] takes for code.
fn code_names(doc: &str) -> Vec<String> {
    let text = without_fences(doc);
    let mut names: Vec<String> =
        text.split('`').skip(1).step_by(2).filter_map(code_name).map(str::to_owned).collect();
    let mut in_block = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if in_block {
            let unmarked = line.split('`').step_by(2).flat_map(unmarked_code_names);
            names.extend(unmarked.map(str::to_owned));
        }
    }
    names
}

/// Whether the code has `name` (a [`code_name`]): a file or folder is the end of a path of
/// `files`; otherwise each name in it (letters, digits, `_` and `-`; not a number alone) is a
/// whole word of the sources, and a lowercase name after a type's (`Type::method`) is a
/// function's: `fn method`.
fn the_code_has(name: &str, files: &[String], sources: &Sources) -> bool {
    if name.ends_with('/') || ENDINGS.iter().any(|e| name.ends_with(e)) {
        return names_a_file(files, "", name);
    }
    let pieces: Vec<&str> = name
        .split(|c: char| !is_name_char(c) && c != '-')
        .filter(|p| !p.is_empty() && !p.chars().all(|c| c.is_ascii_digit()))
        .collect();
    let method = match name.rsplit_once("::") {
        Some((owner, last)) => {
            let owner = owner.rsplit("::").next().unwrap_or_default();
            owner.starts_with(char::is_uppercase) && last.starts_with(char::is_lowercase)
        }
        None => false,
    };
    let last = pieces.last().copied().unwrap_or_default();
    !pieces.is_empty()
        && pieces.iter().all(|p| sources.has_word(p))
        && (!method || sources.has_word(&format!("fn {last}")))
}

/// The code names of `doc` that the code does not have, each once.
fn missing_code_names(doc: &str, files: &[String], sources: &Sources) -> Vec<String> {
    let mut missing: Vec<String> =
        code_names(doc).into_iter().filter(|n| !the_code_has(n, files, sources)).collect();
    missing.sort();
    missing.dedup();
    missing
}

/// The repository's files and ARCHITECTURE.md.
fn the_repository() -> (Vec<String>, String) {
    let root = repository();
    let mut files = Vec::new();
    files_under(&root, &root, &mut files);
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    (files, doc)
}

#[test]
fn every_code_name_architecture_md_writes_is_in_the_code() {
    let (files, doc) = the_repository();
    let sources = Sources::read(&repository(), &files);
    let names = code_names(&doc);
    assert!(names.len() > 300, "too few code names found: {names:?}");
    let missing = missing_code_names(&doc, &files, &sources);
    assert!(missing.is_empty(), "ARCHITECTURE.md names code that does not exist: {missing:?}");
}

#[test]
fn a_code_name_that_is_not_in_the_code_fails_the_check() {
    let (files, doc) = the_repository();
    let sources = Sources::read(&repository(), &files);
    let broken: [(&str, &[&str]); 7] = [
        ("the engine calls `no_such_function` first.", &["no_such_function"]),
        ("a `NoSuchType` holds it.", &["NoSuchType"]),
        ("see `Scheduler::no_such_method`.", &["Scheduler::no_such_method"]),
        ("`engine/no_such_file.rs` holds it.", &["engine/no_such_file.rs"]),
        ("`NO_SUCH_VARIABLE=1` sets it.", &["NO_SUCH_VARIABLE=1"]),
        ("```\nlib.rs   NoSuchHelper::no_such_step\n```", &["NoSuchHelper::no_such_step"]),
        ("`Reply<NoSuchArgument>` and `serve --no-such-flag` are not checked.", &[]),
    ];
    for (sentence, names) in broken {
        let copy = format!("{doc}\n{sentence}\n");
        assert_eq!(missing_code_names(&copy, &files, &sources), names, "{sentence}");
    }
    // The real names pass, written any way the rules allow.
    let fine = "`Scheduler::lease_checked`, `RegisterRequest.slots`, `cpu_features!`, `Reply<T>`";
    assert!(missing_code_names(&format!("{doc}\n{fine}\n"), &files, &sources).is_empty());
}

#[test]
fn a_name_only_in_a_comment_is_not_in_the_code() {
    let source = r##"
//! only_in_an_inner_doc_comment
/// OnlyInADocComment
fn in_code() -> &'static str { // only_after_code
    let url = "https://example.com/in_a_string"; /* only_in_a_block /* nested */ still_in_it */
    let (quote, slash) = ('"', '/'); after_the_chars(quote, slash);
    let raw = r#"raw "// not_a_comment" string"#; after_the_raw(raw);
    url // only_at_the_end
}
/* only_in_a_block_
   over_two_lines */ after_the_block();
"##;
    let sources = Sources::of(without_comments(source));
    let absent = [
        "only_in_an_inner_doc_comment",
        "OnlyInADocComment",
        "only_after_code",
        "only_in_a_block",
        "nested",
        "still_in_it",
        "only_at_the_end",
        "only_in_a_block_",
        "over_two_lines",
    ];
    for name in absent {
        assert!(!sources.has_word(name), "`{name}` is only in a comment: {}", sources.text);
    }
    let present =
        ["in_code", "in_a_string", "after_the_chars", "not_a_comment", "after_the_raw", "url"];
    for name in present {
        assert!(sources.has_word(name), "`{name}` is in the code: {}", sources.text);
    }
    assert!(sources.has_word("after_the_block"), "{}", sources.text);
    // The same names in the sources with their comments would all be found.
    let with_comments = Sources::of(source.to_owned());
    assert!(absent.iter().all(|name| with_comments.has_word(name)));
}

/// The entries of the "Inside the ..." sections' code blocks that are not where the block puts
/// them: a line that starts at the block's left edge names a file or folder of the section's
/// crate (under its `src/`, or the crate's own folder: `tests/`), as `crate: entry`.
fn misplaced_entries(doc: &str, files: &[String]) -> Vec<String> {
    let (mut krate, mut in_block, mut misplaced) = ("", false, Vec::new());
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let inside = heading.strip_prefix("Inside the ").unwrap_or("");
            krate = workspace_crate(inside).unwrap_or("");
        } else if line.starts_with("```") {
            in_block = !in_block;
        } else if in_block && !krate.is_empty() && !line.starts_with(char::is_whitespace) {
            let entry = line.split_whitespace().next().unwrap_or_default();
            let is_path = entry.ends_with('/') || ENDINGS.iter().any(|e| entry.ends_with(e));
            let there = |dir: String| {
                files
                    .iter()
                    .any(|f| if entry.ends_with('/') { f.starts_with(&dir) } else { *f == dir })
            };
            if is_path
                && !there(format!("{krate}/src/{entry}"))
                && !there(format!("{krate}/{entry}"))
            {
                misplaced.push(format!("{krate}: {entry}"));
            }
        }
    }
    misplaced
}

#[test]
fn every_entry_of_the_crates_layouts_is_where_the_layout_puts_it() {
    let (files, doc) = the_repository();
    assert_eq!(misplaced_entries(&doc, &files), Vec::<String>::new());
    // `page.rs` is a file of the coordinator, but in `http/`, not at the top of its `src/`.
    let moved = doc.replacen("```\ngrpc/", "```\npage.rs       the status page\ngrpc/", 1);
    assert_ne!(moved, doc, "the coordinator's layout starts with grpc/");
    assert_eq!(misplaced_entries(&moved, &files), ["coordinator: page.rs"]);
}

/// The heading of the thread map in ARCHITECTURE.md.
const THREAD_MAP: &str = "## The coordinator's threads";

/// What starts OS threads in Rust code: the builders must be given a name before they spawn or
/// build; a bare `thread::spawn` cannot be.
const THREAD_STARTERS: [&str; 5] = [
    "thread::spawn(",
    "thread::Builder::new()",
    "ThreadPoolBuilder::new()",
    "Builder::new_multi_thread()",
    "Builder::new_current_thread()",
];

/// The code the coordinator binary runs outside tests (`cli/src`, `coordinator/src`, `result/src`
/// for `verify` and `export`, and `core/src/estimate*` for `estimate`), by file: each file's text
/// up to its inline tests, test-only files left out.
fn coordinator_code(files: &[String]) -> Vec<(String, String)> {
    let root = repository();
    files
        .iter()
        .filter(|f| {
            ["cli/src/", "coordinator/src/", "result/src/", "core/src/estimate"]
                .iter()
                .any(|p| f.starts_with(p))
        })
        .filter(|f| f.ends_with(".rs"))
        .filter(|f| !f.ends_with("/tests.rs") && !f.ends_with("_tests.rs"))
        .map(|f| {
            let text = std::fs::read_to_string(root.join(f)).unwrap();
            let code = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default().to_owned();
            (f.clone(), code)
        })
        .collect()
}

/// The threads `code` starts, by the name each is given (`None`: none).
fn thread_names(code: &str) -> Vec<Option<String>> {
    let mut names = Vec::new();
    for starter in THREAD_STARTERS {
        for (at, _) in code.match_indices(starter) {
            if starter == "thread::spawn(" {
                names.push(None);
                continue;
            }
            let chain = &code[at + starter.len()..];
            let end = [".spawn(", ".spawn_scoped(", ".build()"]
                .iter()
                .filter_map(|e| chain.find(e))
                .min()
                .unwrap_or(0);
            let chain = &chain[..end];
            let named = chain.find(".name(").or_else(|| chain.find(".thread_name("));
            let name = named.and_then(|at| chain[at..].split('"').nth(1)).map(str::to_owned);
            names.push(name);
        }
    }
    names
}

/// What is wrong with the threads of `code` (file, text): a thread started without a name, or
/// a name that the thread map of `doc` does not give in backticks.
fn thread_mistakes(code: &[(String, String)], doc: &str) -> Vec<String> {
    let map = doc.split(THREAD_MAP).nth(1).unwrap_or_default().split("\n## ").next().unwrap();
    let mut mistakes = Vec::new();
    for (file, text) in code {
        for name in thread_names(text) {
            match name {
                None => mistakes.push(format!("{file}: a thread without a name")),
                Some(name) if !map.contains(&format!("`{name}`")) => {
                    mistakes.push(format!("{file}: `{name}` is not in the thread map"))
                }
                Some(_) => {}
            }
        }
    }
    mistakes
}

/// Every OS thread the coordinator starts is named in code, so that `top -H` and `ps -L` tell
/// them apart, and ARCHITECTURE.md's thread map gives every name.
#[test]
fn every_thread_the_coordinator_starts_is_named_and_in_the_thread_map() {
    let (files, doc) = the_repository();
    let code = coordinator_code(&files);
    let names: Vec<_> = code.iter().flat_map(|(_, text)| thread_names(text)).collect();
    assert!(names.len() >= 7, "too few threads found: {names:?}");
    assert_eq!(thread_mistakes(&code, &doc), Vec::<String>::new());

    let broken = [
        ("a.rs", "std::thread::spawn(move || work());"),
        ("b.rs", "let t = std::thread::Builder::new().stack_size(1 << 20).spawn(work);"),
        (
            "c.rs",
            "rayon::ThreadPoolBuilder::new().thread_name(|i| format!(\"nq-unmapped-{i}\")).build()",
        ),
        ("d.rs", "tokio::runtime::Builder::new_multi_thread().enable_all().build()"),
    ];
    let broken: Vec<_> = broken.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect();
    assert_eq!(
        thread_mistakes(&broken, &doc),
        [
            "a.rs: a thread without a name",
            "b.rs: a thread without a name",
            "c.rs: `nq-unmapped-{i}` is not in the thread map",
            "d.rs: a thread without a name",
        ]
    );
}
