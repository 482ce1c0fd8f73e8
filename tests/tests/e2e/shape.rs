//! The code keeps its shape: no function over [`MAX_FN_LINES`] lines outside tests in the library
//! crates and the command line ([`FN_CRATES`]), no function of test code anywhere over
//! [`MAX_TEST_FN_LINES`] lines, and no `.rs` file anywhere over [`MAX_FILE_LINES`] lines, its
//! inline tests counted.
//!
//! The sources are read with a small Rust tokenizer (strings, raw strings, chars and comments
//! skipped, so a brace inside them counts for nothing) and brace matching: a function runs from
//! the line of its `fn` to the line of its closing brace. Test code, held to the looser function
//! limit instead of the other: code under a `#[cfg(test)]` or `#[test]` item, files that are test
//! modules (declared under `#[cfg(test)]`, and the modules below them), and `tests/` directories,
//! in every crate of the workspace. A test reads as the story of what it shows, its setup and
//! checks in named helpers, so a long one is split too. No file is exempt from the file limit but
//! those on [`TEMPORARY_LONG_FILES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a non-test function may be, in lines.
const MAX_FN_LINES: usize = 80;
/// The longest a function of test code (a test or a helper of tests) may be, in lines.
const MAX_TEST_FN_LINES: usize = 100;
/// The longest a `.rs` file may be, in lines (its inline tests counted).
const MAX_FILE_LINES: usize = 700;
/// The crates whose non-test functions are held to [`MAX_FN_LINES`].
const FN_CRATES: [&str; 8] =
    ["core", "scheduler", "store", "coordinator", "cli", "worker", "gpu", "proto"];
/// Files allowed over [`MAX_FILE_LINES`] for a while (none now); the test fails while a file here
/// is short enough to leave it.
const TEMPORARY_LONG_FILES: [&str; 0] = [];

/// One token of Rust source: what brace matching and item detection need, with its line (1-based).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
    /// A number, a char literal or a lifetime's quote: nothing the checks look at.
    Other,
}

/// The tokens of `src`, each with its line; comments, and the insides of strings and chars, are
/// skipped (a string keeps its text for `#[path = "..."]`).
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        let start_line = line;
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    (depth, i) = (depth + 1, i + 2);
                } else if c[i] == '*' && at(i + 1) == '/' {
                    (depth, i) = (depth - 1, i + 2);
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"..." / r#"..."# (and b, c prefixes): no escapes, ends at a quote and the hashes.
            i = c[i..].iter().position(|&x| x == '"').map_or(c.len(), |p| i + p + 1);
            let closing: Vec<char> =
                std::iter::once('"').chain("#".repeat(hashes).chars()).collect();
            let begin = i;
            while i < c.len() && !c[i..].starts_with(&closing) {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            out.push((Tok::Str(c[begin..i.min(c.len())].iter().collect()), start_line));
            i += closing.len();
        } else if ch == '"' || ((ch == 'b' || ch == 'c') && at(i + 1) == '"') {
            i += if ch == '"' { 1 } else { 2 };
            let begin = i;
            while i < c.len() && c[i] != '"' {
                let escape = c[i] == '\\';
                line += usize::from(c[i] == '\n' || escape && at(i + 1) == '\n');
                i += if escape { 2 } else { 1 };
            }
            out.push((Tok::Str(c[begin..i.min(c.len())].iter().collect()), start_line));
            i += 1;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            // A char literal ('x', '\n', '{'), or the quote of a lifetime or label ('a).
            let q = if ch == '\'' { i } else { i + 1 };
            if at(q + 1) == '\\' {
                // Past the backslash and the escaped character, then to the closing quote.
                i = q + 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(q + 2) == '\'' {
                i = q + 3;
            } else {
                i = q + 1;
            }
            out.push((Tok::Other, start_line));
        } else if ch.is_alphanumeric() || ch == '_' {
            let begin = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[begin..i].iter().collect();
            let number = ch.is_ascii_digit();
            out.push((if number { Tok::Other } else { Tok::Ident(word) }, start_line));
        } else {
            out.push((Tok::Punct(ch), start_line));
            i += 1;
        }
    }
    out
}

/// The number of `#`s of a raw string starting at `i` (`r"`, `r#"`, `br"`, `cr#"`...), if one does.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut j = i;
    if (at(j) == 'b' || at(j) == 'c') && at(j + 1) == 'r' {
        j += 1;
    }
    if at(j) != 'r' || (i > 0 && (at(i - 1).is_alphanumeric() || at(i - 1) == '_')) {
        return None;
    }
    let hashes = c[j + 1..].iter().take_while(|&&x| x == '#').count();
    (at(j + 1 + hashes) == '"').then_some(hashes)
}

/// What one file says of its shape.
#[derive(Debug, Default, PartialEq)]
struct FileShape {
    /// Non-test functions over [`MAX_FN_LINES`]: name, first line, lines.
    long_fns: Vec<(String, usize, usize)>,
    /// Functions of test code over [`MAX_TEST_FN_LINES`]: name, first line, lines.
    long_test_fns: Vec<(String, usize, usize)>,
    /// Out-of-line modules it declares: name, whether under `#[cfg(test)]`, its `#[path]`.
    mods: Vec<(String, bool, Option<String>)>,
}

/// The attribute starting at token `i` (`#[...]` or `#![...]`): where it ends, whether it makes
/// its item test code (`#[test]`, `#[tokio::test]`, a `cfg` naming `test` and no `not`), and its
/// `#[path = "..."]`.
fn attribute(t: &[(Tok, usize)], i: usize) -> Option<(usize, bool, Option<String>)> {
    let inner = t.get(i + 1).map(|x| &x.0) == Some(&Tok::Punct('!'));
    let open = if inner { i + 2 } else { i + 1 };
    if t.get(open).map(|x| &x.0) != Some(&Tok::Punct('[')) {
        return None;
    }
    let (mut depth, mut end) = (0, open);
    while end < t.len() {
        match t[end].0 {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        end += 1;
    }
    let body = &t[open + 1..end.min(t.len())];
    let ident = |k: usize| match body.get(k) {
        Some((Tok::Ident(w), _)) => w.as_str(),
        _ => "",
    };
    let words: Vec<&str> = (0..body.len()).map(ident).collect();
    let test = (words.len() == 1 && words[0] == "test")
        || words.starts_with(&["tokio", "", "", "test"])
        || (ident(0) == "cfg" && words.contains(&"test") && !words.contains(&"not"));
    let path = match (ident(0), body.get(2)) {
        ("path", Some((Tok::Str(p), _))) => Some(p.clone()),
        _ => None,
    };
    Some((end, test, path))
}

/// The long functions (non-test and test apart) and the module declarations of one file;
/// `test_file`: the whole file is test code.
fn file_shape(src: &str, test_file: bool) -> FileShape {
    let t = tokens(src);
    let mut shape = FileShape::default();
    // Open braces: whether test code, and the function whose body it opens (name, line).
    let mut frames: Vec<(bool, Option<(String, usize)>)> = Vec::new();
    let (mut pending_test, mut pending_path, mut pending_fn) = (false, None, None);
    let mut file_test = test_file;
    let mut parens = 0i32;
    let mut i = 0;
    while i < t.len() {
        let test_here = frames.last().map_or(file_test, |f| f.0);
        let next = |k: usize| t.get(i + k).map(|x| &x.0);
        match &t[i].0 {
            Tok::Punct('#') => {
                if let Some((end, test, path)) = attribute(&t, i) {
                    if next(1) == Some(&Tok::Punct('!')) {
                        // An inner attribute: of the file or the module it stands in.
                        match frames.last_mut() {
                            Some(frame) => frame.0 |= test,
                            None => file_test |= test,
                        }
                    } else {
                        pending_test |= test;
                        pending_path = path.or(pending_path);
                    }
                    i = end;
                }
            }
            Tok::Ident(w) if w == "fn" => {
                if let Some(Tok::Ident(name)) = next(1) {
                    pending_fn = Some((name.clone(), t[i].1));
                }
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct(';'))) = (next(1), next(2)) {
                    shape.mods.push((name.clone(), test_here || pending_test, pending_path.take()));
                }
            }
            Tok::Punct('(' | '[') => parens += 1,
            Tok::Punct(')' | ']') => parens -= 1,
            Tok::Punct(';') if parens == 0 => {
                (pending_test, pending_path, pending_fn) = (false, None, None);
            }
            Tok::Punct('{') => {
                frames.push((test_here || pending_test, pending_fn.take()));
                (pending_test, pending_path) = (false, None);
            }
            Tok::Punct('}') => {
                (pending_test, pending_path, pending_fn) = (false, None, None);
                if let Some((test, Some((name, first)))) = frames.pop() {
                    let lines = t[i].1 - first + 1;
                    if test && lines > MAX_TEST_FN_LINES {
                        shape.long_test_fns.push((name, first, lines));
                    } else if !test && lines > MAX_FN_LINES {
                        shape.long_fns.push((name, first, lines));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    shape
}

/// The file a module declaration `mod name;` in `parent` (a path relative to the repository)
/// names, given the files that exist.
fn module_file(
    files: &BTreeMap<String, String>,
    parent: &str,
    name: &str,
    path: Option<&str>,
) -> Option<String> {
    let parent = Path::new(parent);
    let dir = parent.parent().unwrap_or(Path::new(""));
    if let Some(path) = path {
        return Some(normalize(&dir.join(path)));
    }
    let file = parent.file_name().unwrap_or_default().to_string_lossy();
    let in_root_dir = ["benches", "bin", "examples", "tests"]
        .contains(&dir.file_name().unwrap_or_default().to_string_lossy().as_ref());
    let base =
        if ["lib.rs", "main.rs", "mod.rs", "build.rs"].contains(&file.as_ref()) || in_root_dir {
            dir.to_owned()
        } else {
            dir.join(parent.file_stem().unwrap_or_default())
        };
    [base.join(format!("{name}.rs")), base.join(name).join("mod.rs")]
        .iter()
        .map(|p| normalize(p))
        .find(|p| files.contains_key(p))
}

/// `a/b/../c` as `a/c`, with `/` separators.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// Every breach of the limits among `files` (path relative to the repository -> source).
fn breaches(files: &BTreeMap<String, String>) -> Vec<String> {
    // Test-module files: declared under #[cfg(test)], or below such a file, to a fixed point.
    let mut test_files: BTreeSet<String> = BTreeSet::new();
    loop {
        let before = test_files.len();
        for (path, src) in files {
            let in_test = test_files.contains(path);
            for (name, test, at) in file_shape(src, in_test).mods {
                if let Some(child) = module_file(files, path, &name, at.as_deref()) {
                    if test || in_test {
                        test_files.insert(child);
                    }
                }
            }
        }
        if test_files.len() == before {
            break;
        }
    }
    let mut found = Vec::new();
    for (path, src) in files {
        let lines = src.lines().count();
        if lines > MAX_FILE_LINES && !TEMPORARY_LONG_FILES.contains(&path.as_str()) {
            found.push(format!("{path}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        let in_fn_crate = FN_CRATES.iter().any(|c| path.starts_with(&format!("{c}/")));
        let in_tests_dir = path.split('/').any(|part| part == "tests");
        let shape = file_shape(src, in_tests_dir || test_files.contains(path));
        if in_fn_crate {
            for (name, line, n) in shape.long_fns {
                found.push(format!(
                    "{path}:{line}: fn {name} is {n} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
        for (name, line, n) in shape.long_test_fns {
            found.push(format!(
                "{path}:{line}: test fn {name} is {n} lines (at most {MAX_TEST_FN_LINES})"
            ));
        }
    }
    found
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Every `.rs` file of the repository (build output and hidden folders left out).
fn rust_files(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(root, &path, out);
            }
        } else if name.ends_with(".rs") {
            let rel = normalize(path.strip_prefix(root).unwrap());
            out.insert(rel, std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn no_long_functions_in_code_or_tests_and_no_long_files() {
    let root = repository();
    let mut files = BTreeMap::new();
    rust_files(&root, &root, &mut files);
    assert!(files.contains_key("core/src/lib.rs") && files.len() > 100, "{} files", files.len());
    let found = breaches(&files);
    assert!(found.is_empty(), "split these (see tests/tests/e2e/shape.rs):\n{}", found.join("\n"));
    for path in TEMPORARY_LONG_FILES {
        let lines = files.get(path).map_or(0, |src| src.lines().count());
        assert!(
            lines > MAX_FILE_LINES,
            "{path} is {lines} lines now: take it off TEMPORARY_LONG_FILES in tests/tests/e2e/shape.rs"
        );
    }
}

/// A function of `body_lines` lines between its `fn` line and its closing brace, each a line of
/// `filler`.
fn function(name: &str, body_lines: usize, filler: &str) -> String {
    format!("fn {name}() {{\n{}}}\n", format!("    {filler}\n").repeat(body_lines))
}

#[test]
fn a_function_over_the_limit_is_found_and_one_at_it_is_not() {
    let src = function("at_limit", MAX_FN_LINES - 2, "let x = 1;")
        + &function("over", MAX_FN_LINES - 1, "let x = 1;");
    let shape = file_shape(&src, false);
    assert_eq!(shape.long_fns, vec![("over".to_owned(), MAX_FN_LINES + 1, MAX_FN_LINES + 1)]);
}

#[test]
fn braces_in_strings_chars_and_comments_do_not_count() {
    // Each filler line would open or close a brace were it code; the function stays 85 lines.
    for filler in [
        r#"let s = "{ \" {";"#,
        r##"let s = r#"} "{ "#;"##,
        "let c = '{'; let l: &'static str = \"\";",
        "// }",
        "/* { /* } */ { */",
        "let b = b'}'; let e = '\\'';",
    ] {
        let src = function("long", 83, filler) + &function("short", 3, "x();");
        let shape = file_shape(&src, false);
        assert_eq!(shape.long_fns, vec![("long".to_owned(), 1, 85)], "{filler}");
    }
}

#[test]
fn test_code_is_exempt_from_the_function_limit_but_not_from_the_file_limit() {
    let long = function("long", 90, "x();");
    let inline = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n#[test]\n{long}");
    assert_eq!(file_shape(&inline, false).long_fns, vec![]);
    assert_eq!(file_shape(&format!("#[cfg(test)]\nimpl A {{\n{long}}}\n"), false).long_fns, vec![]);
    assert_eq!(file_shape(&format!("mod real {{\n{long}}}\n"), false).long_fns.len(), 1);
    // A test module in a file of its own, and one below it, declared from the crate's lib.rs.
    let files = BTreeMap::from([
        ("core/src/lib.rs".to_owned(), "mod a;\n#[cfg(test)]\nmod b;\n".to_owned()),
        ("core/src/a.rs".to_owned(), long.clone()),
        ("core/src/b.rs".to_owned(), "mod c;\n".to_owned() + &long),
        ("core/src/b/c.rs".to_owned(), long.clone()),
        ("core/tests/d.rs".to_owned(), long.clone()),
        ("tools/src/e.rs".to_owned(), long.clone()),
        ("core/src/big.rs".to_owned(), "#[cfg(test)]\nmod t {}\n".repeat(MAX_FILE_LINES)),
    ]);
    assert_eq!(
        breaches(&files),
        vec![
            format!("core/src/a.rs:1: fn long is 92 lines (at most {MAX_FN_LINES})"),
            format!("core/src/big.rs: {} lines (at most {MAX_FILE_LINES})", 2 * MAX_FILE_LINES),
        ]
    );
}

#[test]
fn a_test_function_over_its_limit_is_found_and_one_at_it_is_not() {
    let at_limit = function("at_limit", MAX_TEST_FN_LINES - 2, "x();");
    let over = function("over", MAX_TEST_FN_LINES - 1, "x();");
    let over_found = |first: usize| vec![("over".to_owned(), first, MAX_TEST_FN_LINES + 1)];
    // A #[test] function, one in a #[cfg(test)] module, and a whole test file.
    let test_fn = format!("#[test]\n{at_limit}#[test]\n{over}");
    let shape = file_shape(&test_fn, false);
    assert_eq!((shape.long_fns, shape.long_test_fns), (vec![], over_found(MAX_TEST_FN_LINES + 3)));
    let module = format!("#[cfg(test)]\nmod tests {{\n{at_limit}{over}}}\n");
    assert_eq!(file_shape(&module, false).long_test_fns, over_found(MAX_TEST_FN_LINES + 3));
    assert_eq!(
        file_shape(&(at_limit.clone() + &over), true).long_test_fns,
        over_found(MAX_TEST_FN_LINES + 1)
    );
    // Every crate's tests are held to it, not only the crates of FN_CRATES.
    let files = BTreeMap::from([
        ("core/src/lib.rs".to_owned(), "#[cfg(test)]\nmod b;\n".to_owned()),
        ("core/src/b.rs".to_owned(), over.clone()),
        ("tests/tests/e2e/c.rs".to_owned(), at_limit.clone() + &over),
        ("tools/src/d.rs".to_owned(), format!("#[test]\n{over}")),
    ]);
    let limit = format!("is {} lines (at most {MAX_TEST_FN_LINES})", MAX_TEST_FN_LINES + 1);
    assert_eq!(
        breaches(&files),
        vec![
            format!("core/src/b.rs:1: test fn over {limit}"),
            format!("tests/tests/e2e/c.rs:{}: test fn over {limit}", MAX_TEST_FN_LINES + 1),
            format!("tools/src/d.rs:2: test fn over {limit}"),
        ]
    );
}

#[test]
fn modules_resolve_as_rustc_finds_them() {
    let files: BTreeMap<String, String> =
        ["core/src/x.rs", "core/src/x/y.rs", "core/src/z/mod.rs", "core/benches/w/v.rs"]
            .into_iter()
            .map(|p| (p.to_owned(), String::new()))
            .collect();
    let resolve = |parent: &str, name: &str, path: Option<&str>| {
        module_file(&files, parent, name, path).unwrap_or_default()
    };
    assert_eq!(resolve("core/src/lib.rs", "x", None), "core/src/x.rs");
    assert_eq!(resolve("core/src/x.rs", "y", None), "core/src/x/y.rs");
    assert_eq!(resolve("core/src/lib.rs", "z", None), "core/src/z/mod.rs");
    assert_eq!(resolve("core/benches/w.rs", "v", Some("w/v.rs")), "core/benches/w/v.rs");
    assert_eq!(resolve("core/src/lib.rs", "missing", None), "");
    // The attribute parser finds the #[path] and the test flag of a declaration.
    let shape = file_shape("#[cfg(test)]\n#[path = \"w/v.rs\"]\nmod v;\nmod u;\n", false);
    assert_eq!(
        shape.mods,
        vec![("v".to_owned(), true, Some("w/v.rs".to_owned())), ("u".to_owned(), false, None)]
    );
}
