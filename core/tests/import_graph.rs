//! The workspace's import graph has no circle: within each crate, no module
//! (one file) uses, directly or through others, a module that uses it back.
//!
//! A circle is two rooms that can only change together: the agent once had
//! `hub → shard → recorder → metrics → hub`, worked around with a
//! `OnceLock` attached after construction. The rule that keeps it out is
//! "handles down, events up" (docs/layout.md); this test holds it.
//!
//! What counts as a use: a path that starts with `crate::`, `super::`,
//! `self::` or the name of a child module the file declares (`mod x;`),
//! resolved to the deepest module file it names. A parent declaring a
//! child is not a use; a child reaching back up with `super::Item` is.
//! Test code (`#[cfg(test)]` items and `tests.rs` files) is left out: tests
//! may look anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates held to the rule, relative to the workspace root.
const CRATES: &[&str] = &["core", "os", "agent", "probe", "collector", "bench", "fuzz"];

#[test]
fn no_crate_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut report = String::new();
    for krate in CRATES {
        let graph = Graph::of(&root.join(krate).join("src"));
        assert!(graph.modules.len() > 3, "{krate}: too few modules found");
        for circle in graph.circles() {
            report.push_str(&format!("{krate}: {}\n", graph.describe(&circle)));
        }
    }
    assert!(
        report.is_empty(),
        "import circles (module -> the modules of the circle it uses):\n{report}"
    );
}

#[test]
fn a_circle_is_found_through_super_and_child_paths() {
    let dir = tempfile_dir();
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "mod inner;\nfn f() { inner::g(); }\n").unwrap();
    std::fs::write(
        dir.join("a/inner.rs"),
        "use super::Thing;\n#[cfg(test)]\nmod tests { use crate::b::X; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.rs"), "// crate::a::Thing in a comment\n").unwrap();
    let graph = Graph::of(&dir);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{:?}", graph.uses);
    assert_eq!(circles[0], vec!["a".to_owned(), "a::inner".to_owned()]);
    assert!(
        graph.uses["b"].is_empty(),
        "comments and tests are not uses"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "skewscope-import-graph-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Modules (by path, `""` the crate root) and the modules each uses.
struct Graph {
    modules: BTreeMap<String, PathBuf>,
    uses: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn of(src: &Path) -> Graph {
        let mut modules = BTreeMap::new();
        collect(src, src, &mut modules);
        let mut graph = Graph {
            modules,
            uses: BTreeMap::new(),
        };
        let names: Vec<(String, PathBuf)> = graph
            .modules
            .iter()
            .map(|(m, p)| (m.clone(), p.clone()))
            .collect();
        for (module, path) in names {
            if module.rsplit("::").next() == Some("tests") {
                continue;
            }
            let code = without_tests(&without_comments_and_strings(
                &std::fs::read_to_string(&path).unwrap(),
            ));
            let children = declared_children(&code);
            let mut used = BTreeSet::new();
            for path in paths_in(&code) {
                if let Some(target) = graph.resolve(&module, &children, &path)
                    && target != module
                {
                    used.insert(target);
                }
            }
            graph.uses.insert(module, used);
        }
        graph
    }

    /// The module file `path` (written in `module`) names, if it is one of
    /// this crate's.
    fn resolve(
        &self,
        module: &str,
        children: &BTreeSet<String>,
        path: &[String],
    ) -> Option<String> {
        let base: Vec<&str> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").collect()
        };
        let first = path.first()?.as_str();
        let absolute: Vec<String> = match first {
            "crate" => path[1..].to_vec(),
            "self" => base
                .iter()
                .map(|s| s.to_string())
                .chain(path[1..].iter().cloned())
                .collect(),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let kept = base.len().checked_sub(ups)?;
                base[..kept]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(path[ups..].iter().cloned())
                    .collect()
            }
            child if children.contains(child) => base
                .iter()
                .map(|s| s.to_string())
                .chain(path.iter().cloned())
                .collect(),
            _ => return None,
        };
        (0..=absolute.len())
            .rev()
            .map(|n| absolute[..n].join("::"))
            .find(|candidate| self.modules.contains_key(candidate))
    }

    /// Every set of two or more modules that use each other, each sorted
    /// (Tarjan's strongly connected components).
    fn circles(&self) -> Vec<Vec<String>> {
        struct State<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            found: Vec<Vec<String>>,
        }
        fn visit<'g>(s: &mut State<'g>, v: &'g str) {
            let n = s.index.len();
            s.index.insert(v, n);
            s.low.insert(v, n);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.uses.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !s.graph.uses.contains_key(w) {
                    continue;
                }
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = s.stack.pop().expect("v is on the stack");
                    s.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    s.found.push(component);
                }
            }
        }
        let mut state = State {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for v in self.uses.keys() {
            if !state.index.contains_key(v.as_str()) {
                visit(&mut state, v);
            }
        }
        state.found
    }

    fn describe(&self, circle: &[String]) -> String {
        let name = |m: &str| {
            if m.is_empty() {
                "<crate root>".to_owned()
            } else {
                m.to_owned()
            }
        };
        circle
            .iter()
            .map(|m| {
                let inside: Vec<String> = self.uses[m]
                    .iter()
                    .filter(|u| circle.contains(u))
                    .map(|u| name(u))
                    .collect();
                format!("{} -> [{}]", name(m), inside.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Every `.rs` file under `dir`, by module path.
fn collect(src: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(src, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let module = match parts.as_slice() {
            [only] if only == "lib" || only == "main" => String::new(),
            [.., last] if last == "mod" => parts[..parts.len() - 1].join("::"),
            _ => parts.join("::"),
        };
        // A binary beside the library (`src/bin/*` or `main.rs` next to
        // `lib.rs`) is a crate of its own; it only uses the library.
        if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        out.entry(module).or_insert(path);
    }
}

/// The code with comments and the insides of string and char literals
/// blanked (what they say is not a use).
fn without_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
            out.push_str("' '");
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // Quote, backslash, the escaped character, then to the quote.
            i += 3;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            let c = src[i..].chars().next().expect("inside the string");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The code without `#[cfg(test)]` items (a `mod tests { ... }` or `mod
/// tests;`, or any other item so marked).
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let brace = after.find('{');
        let semi = after.find(';');
        let end = match (brace, semi) {
            (_, Some(s)) if brace.is_none_or(|b| s < b) => s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (i, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The child modules a file declares (`mod x;`).
fn declared_children(code: &str) -> BTreeSet<String> {
    let tokens = tokens(code);
    tokens
        .windows(3)
        .filter(|w| w[0] == "mod" && w[2] == ";")
        .map(|w| w[1].clone())
        .collect()
}

/// Every path of two or more segments in the code, with `use` trees
/// expanded (`use a::{b, c::d}` is `a::b` and `a::c::d`).
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let tokens = tokens(code);
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |e| i + e);
            expand_use(&tokens[i + 1..end], &[], &mut paths);
            i = end;
            continue;
        }
        if is_ident(&tokens[i]) && tokens.get(i + 1).is_some_and(|t| t == "::") {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t == "::")
                && tokens.get(j + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            // A path is only read from its start (not `a::b` inside `x::a::b`).
            if i == 0 || tokens[i - 1] != "::" {
                paths.push(path);
            }
            i = j;
            continue;
        }
        i += 1;
    }
    paths
}

/// Expands one `use` tree (its tokens) under `prefix`.
fn expand_use(tree: &[String], prefix: &[String], out: &mut Vec<Vec<String>>) {
    // Split at top-level commas.
    let mut parts: Vec<&[String]> = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, t) in tree.iter().enumerate() {
        match t.as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "," if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..]);
    for part in parts {
        let mut path = prefix.to_vec();
        let mut i = 0;
        while i < part.len() {
            match part[i].as_str() {
                "::" => i += 1,
                "{" => {
                    let close =
                        part.len() - 1 - part.iter().rev().position(|t| t == "}").unwrap_or(0);
                    expand_use(&part[i + 1..close], &path, out);
                    path.clear();
                    break;
                }
                "as" => break,
                t if is_ident(t) => {
                    path.push(t.to_owned());
                    i += 1;
                }
                _ => i += 1,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Identifiers, `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_owned());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}
