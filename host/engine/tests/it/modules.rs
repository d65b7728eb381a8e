//! The layering of the workspace, read from its sources: no crate has files that import each
//! other in a loop (a module's `crate::` and `super::` paths are its arrows, and the crate root
//! is a module like the others: a module that imports an item of the root while the root names
//! that module is a loop), the engine holds no storage code, and the layers depend on each
//! other in one direction only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's root, two folders above this crate.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the engine lives two folders below the workspace root")
        .to_path_buf()
}

/// Every crate of the workspace with Rust sources: folders holding `Cargo.toml` and `src/`.
pub(crate) fn crates(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for group in ["host", "plugins", "tools", "examples", "tests/plugins", "."] {
        let Ok(entries) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
                found.push(dir);
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Each `.rs` file under `src` (binaries of `src/bin` excepted: each is a crate of its own),
/// by module path: `parquet/stream` for `src/parquet/stream.rs`, `draw` for `src/draw/mod.rs`.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path != src.join("bin") {
                    walk(&path, src, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("")
                .to_string_lossy()
                .replace('\\', "/");
            let name = relative
                .strip_suffix("/mod")
                .map_or(relative.clone(), str::to_string);
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            out.insert(name, text);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The text without line comments (doc comments name modules without importing them).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string ("https://...") is rare on a line that also imports.
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of each path in a `{a::b, c, d::{e, f}}` group (the text after `{`).
fn group_heads(rest: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    let mut at_head = true;
    for c in rest.chars() {
        match c {
            '{' => {
                depth += 1;
                at_head = false;
            }
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(std::mem::take(&mut current));
                at_head = true;
            }
            ':' => at_head = false,
            c if at_head && (c.is_alphanumeric() || c == '_') => current.push(c),
            _ => {}
        }
    }
    heads.push(current);
    heads.into_iter().filter(|h| !h.is_empty()).collect()
}

/// The identifier (and the one after it, for `a::b`) that follows each `prefix` in `text`.
fn after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix) {
        let start = from + i;
        from = start + prefix.len();
        let before = text[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.push(&text[from..]);
    }
    out
}

fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// Where a path that names no module of the crate leads: to the crate root, which defines or
/// re-exports it (`lib`, or `main` for a binary).
fn root_of(modules: &BTreeMap<String, String>) -> Option<&'static str> {
    ["lib", "main"]
        .into_iter()
        .find(|root| modules.contains_key(*root))
}

/// The children a module names bare (`child::item`, `pub use child::X`): for a crate root the
/// top-level modules, for `draw` (a `draw/mod.rs`) the modules `draw/*`.
fn children_named(module: &str, text: &str, modules: &BTreeMap<String, String>) -> Vec<String> {
    let is_root = module == "lib" || module == "main";
    modules
        .keys()
        .filter_map(|child| {
            let name = if is_root {
                (child != "lib" && child != "main" && !child.contains('/'))
                    .then_some(child.as_str())
            } else {
                child
                    .strip_prefix(module)
                    .and_then(|rest| rest.strip_prefix('/'))
                    .filter(|rest| !rest.contains('/'))
            }?;
            let named = after(text, &format!("{name}::")).into_iter().any(|rest| {
                // `a::name::` is another crate's module of that name; `self::name::` is ours.
                let start = text.len() - rest.len() - name.len() - 2;
                let before = &text[..start];
                !before.ends_with(':') || before.ends_with("self::")
            });
            named.then(|| child.clone())
        })
        .collect()
}

/// The arrows between the modules of one crate, its root included: a module's `crate::` and
/// `super::` paths, a path to an item of the root (`crate::Engine`) pointing at the root, and
/// a module's bare paths into its own children (the root's `pub use door::Ask`).
fn arrows(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let root = root_of(modules);
    let known = |name: &str| modules.contains_key(name);
    // A path into the crate that names no module names an item of the root.
    let resolve = |name: String| -> Option<String> {
        if known(&name) && Some(name.as_str()) != root {
            Some(name)
        } else {
            root.map(str::to_string)
        }
    };
    for (module, text) in modules {
        let text = code(text);
        let mut targets = Vec::new();
        for rest in after(&text, "crate::") {
            if let Some(group) = rest.strip_prefix('{') {
                targets.extend(group_heads(group).into_iter().filter_map(&resolve));
                continue;
            }
            let head = ident(rest);
            let tail = rest[head.len()..]
                .strip_prefix("::")
                .map(ident)
                .unwrap_or_default();
            let nested = format!("{head}/{tail}");
            targets.extend(if known(&nested) {
                Some(nested)
            } else {
                resolve(head.to_string())
            });
        }
        // `super::` inside an inline module (`mod tests { use super::*; }`) is the file itself.
        let outer = without_inline_modules(&text);
        if !module.contains('/') && Some(module.as_str()) != root {
            // A top-level module's `super::` is the crate root: `super::Engine` names an item
            // of the root, `super::door::Ask` the module `door`.
            for rest in after(&outer, "super::") {
                let name = ident(rest);
                if name.is_empty() {
                    continue;
                }
                targets.extend(resolve(name.to_string()));
            }
        }
        if let Some((parent, _)) = module.rsplit_once('/') {
            for rest in after(&outer, "super::") {
                let name = ident(rest);
                if name.is_empty() {
                    continue;
                }
                let sibling = format!("{parent}/{name}");
                targets.push(if known(&sibling) {
                    sibling
                } else {
                    parent.to_string()
                });
            }
        }
        targets.extend(children_named(module, &text, modules));
        for target in targets {
            if known(&target) && &target != module {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// `text` without the bodies of the inline modules it declares (`mod tests { … }`), whose
/// `super::` paths name the file's own module.
fn without_inline_modules(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let opens_module = depth == 0 && {
            let rest = trimmed
                .strip_prefix("pub(crate) ")
                .or_else(|| trimmed.strip_prefix("pub "))
                .unwrap_or(trimmed);
            rest.strip_prefix("mod ")
                .is_some_and(|r| r.trim_end().ends_with('{'))
        };
        if opens_module || depth > 0 {
            depth += line.matches('{').count();
            depth = depth.saturating_sub(line.matches('}').count());
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The groups of modules that import each other in a loop (strongly connected components
/// of more than one module), by Tarjan's algorithm.
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.found.push(group);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|(k, v)| std::iter::once(k.as_str()).chain(v.iter().map(String::as_str)))
        .collect();
    for node in nodes {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn no_crate_has_files_that_import_each_other_in_a_loop() {
    let root = workspace();
    let crates = crates(&root);
    assert!(
        crates.iter().any(|c| c.ends_with("host/storage")) && crates.len() >= 10,
        "the workspace's crates were found: {crates:?}"
    );
    let mut failures = Vec::new();
    let mut arrows_seen = 0;
    for krate in &crates {
        let modules = modules(&krate.join("src"));
        let edges = arrows(&modules);
        arrows_seen += edges.values().map(BTreeSet::len).sum::<usize>();
        for group in loops(&edges) {
            let inside: Vec<String> = group
                .iter()
                .flat_map(|m| {
                    edges[m]
                        .iter()
                        .filter(|t| group.contains(t))
                        .map(move |t| format!("{m} -> {t}"))
                })
                .collect();
            failures.push(format!(
                "{}: {} import each other ({})",
                krate.strip_prefix(&root).unwrap_or(krate).display(),
                group.join(", "),
                inside.join("; ")
            ));
        }
    }
    assert!(
        arrows_seen > 100,
        "the imports were read: {arrows_seen} arrows"
    );
    assert!(
        failures.is_empty(),
        "import loops between files (move what both need into a module below them):\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_reader_finds_a_loop_when_there_is_one() {
    let mut modules = BTreeMap::new();
    modules.insert("a".to_string(), "use crate::{b::X, c};\n".to_string());
    modules.insert("b".to_string(), "fn f() { crate::c::g() }\n".to_string());
    modules.insert(
        "c".to_string(),
        "// crate::a in a comment is no arrow\nuse crate::a::Y;\n".to_string(),
    );
    modules.insert("d".to_string(), "use crate::a;\n".to_string());
    modules.insert("d/e".to_string(), "use super::f;\n".to_string());
    modules.insert("d/f".to_string(), "use super::super::a;\n".to_string());
    let edges = arrows(&modules);
    assert_eq!(
        loops(&edges),
        vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
    );
    assert!(edges["d/e"].contains("d/f"), "{edges:?}");
    modules.insert("c".to_string(), "// crate::a\n".to_string());
    assert!(loops(&arrows(&modules)).is_empty());

    // The crate root counts: a module that imports an item of the root (or one the root
    // re-exports) while the root names that module is a loop; a root that only declares
    // modules and re-exports, with modules importing each other by their own paths, is not.
    let mut rooted = BTreeMap::new();
    rooted.insert(
        "lib".to_string(),
        "mod door;\nmod sum;\npub use door::Ask;\npub struct Engine;\n".to_string(),
    );
    rooted.insert("door".to_string(), "use crate::sum;\n".to_string());
    rooted.insert("sum".to_string(), "use crate::Engine;\n".to_string());
    let edges = arrows(&rooted);
    assert_eq!(
        loops(&edges),
        vec![vec![
            "door".to_string(),
            "lib".to_string(),
            "sum".to_string()
        ]]
    );
    rooted.insert("engine".to_string(), "pub struct Engine;\n".to_string());
    rooted.insert(
        "lib".to_string(),
        "mod door;\nmod engine;\nmod sum;\npub use door::Ask;\npub use engine::Engine;\n"
            .to_string(),
    );
    rooted.insert(
        "sum".to_string(),
        "use crate::engine::Engine;\n".to_string(),
    );
    let edges = arrows(&rooted);
    assert!(loops(&edges).is_empty(), "{edges:?}");
    assert!(
        edges["lib"].contains("door") && edges["lib"].contains("engine"),
        "{edges:?}"
    );
    // A top-level module's `super::` is the root, and a root's `self::door::` names `door`.
    rooted.insert("sum".to_string(), "use super::Engine;\n".to_string());
    assert!(arrows(&rooted)["sum"].contains("lib"));
    rooted.insert(
        "sum".to_string(),
        "use crate::engine::Engine;\n".to_string(),
    );
    rooted.insert(
        "lib".to_string(),
        "mod door;\nmod engine;\nmod sum;\npub use self::door::Ask;\n".to_string(),
    );
    assert!(arrows(&rooted)["lib"].contains("door"));
    // `super::` inside an inline module is the file itself, not the root.
    rooted.insert(
        "sum".to_string(),
        "use crate::engine::Engine;\n#[cfg(test)]\nmod tests {\n    use super::helper;\n}\n"
            .to_string(),
    );
    assert!(
        !arrows(&rooted)["sum"].contains("lib"),
        "{:?}",
        arrows(&rooted)
    );
    // Another crate's module of the same name is no arrow.
    rooted.insert("sum".to_string(), "use datafusion::door::X;\n".to_string());
    assert!(!arrows(&rooted).contains_key("sum"));
}

/// The dependencies a crate declares in its manifest (names before `.workspace` or `=`).
fn declared(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).expect("a manifest reads");
    let mut names = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps
            && let Some(name) = line.split(['.', '=', ' ']).next()
            && !name.is_empty()
            && !name.starts_with('#')
        {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_engine_holds_no_storage_code_and_layers_point_down() {
    let root = workspace();
    let engine = modules(&root.join("host/engine/src"));
    let storage = modules(&root.join("host/storage/src"));
    let shared: Vec<&String> = engine
        .keys()
        .filter(|m| storage.contains_key(*m) && !["lib", "error"].contains(&m.as_str()))
        .collect();
    // Each layer has its own `error` (the engine's wraps storage's); nothing else is in both.
    assert!(shared.is_empty(), "modules in both layers: {shared:?}");
    for module in [
        "backend", "catalog", "dataset", "store", "parquet", "object", "cache", "memory", "watch",
    ] {
        assert!(storage.contains_key(module), "storage keeps `{module}`");
    }
    let engine_deps = declared(&root.join("host/engine/Cargo.toml"));
    assert!(engine_deps.contains("tally-storage"), "{engine_deps:?}");
    for storage_only in [
        "object_store",
        "memmap2",
        "tally-plugin-parquet",
        "crc32fast",
        "notify",
    ] {
        assert!(
            !engine_deps.contains(storage_only),
            "the engine reads no files itself, yet depends on {storage_only}"
        );
    }
    let storage_deps = declared(&root.join("host/storage/Cargo.toml"));
    let plugin_host_deps = declared(&root.join("host/plugin-host/Cargo.toml"));
    for (layer, deps) in [
        ("storage", &storage_deps),
        ("plugin-host", &plugin_host_deps),
    ] {
        for above in ["tally-engine", "tally-mcp", "tally"] {
            assert!(
                !deps.contains(above),
                "{layer} depends on {above}, a layer above it"
            );
        }
    }
}

/// Whether `name` (a crate, `-` written `_`) is named as a path or an import in `text`.
fn names_crate(text: &str, name: &str) -> bool {
    let name = name.replace('-', "_");
    after(text, &name).into_iter().any(|rest| {
        let end = rest.chars().next();
        // `name::`, `name!`, `use name;`, `extern crate name`, `name as`
        end.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

#[test]
fn every_crate_uses_the_dependencies_it_declares() {
    let root = workspace();
    let mut unused = Vec::new();
    let mut checked = 0;
    for krate in crates(&root) {
        let manifest = krate.join("Cargo.toml");
        let mut text: String = modules(&krate.join("src"))
            .values()
            .map(|t| code(t))
            .collect::<Vec<_>>()
            .join("\n");
        // Binaries under `src/bin` and a build script are the crate's code too.
        for extra in ["build.rs"] {
            if let Ok(t) = std::fs::read_to_string(krate.join(extra)) {
                text.push_str(&code(&t));
            }
        }
        if let Ok(bins) = std::fs::read_dir(krate.join("src/bin")) {
            for bin in bins.flatten() {
                if let Ok(t) = std::fs::read_to_string(bin.path()) {
                    text.push_str(&code(&t));
                }
            }
        }
        for dep in declared(&manifest) {
            checked += 1;
            if !names_crate(&text, &dep) {
                unused.push(format!(
                    "{}: {dep}",
                    krate.strip_prefix(&root).unwrap_or(&krate).display()
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "the manifests were read: {checked} dependencies"
    );
    assert!(
        unused.is_empty(),
        "dependencies declared under [dependencies] that the crate's sources never name \
         (remove them, or move them to [dev-dependencies] if only tests use them):\n{}",
        unused.join("\n")
    );
}

#[test]
fn a_dependency_is_named_only_by_a_path_or_an_import() {
    assert!(names_crate("use tally_storage::Dataset;", "tally-storage"));
    assert!(names_crate("serde_json::json!({})", "serde_json"));
    assert!(!names_crate("use tally_storage_x::Y;", "tally-storage"));
    assert!(!names_crate("use my_axum::Y;", "axum"));
    assert!(!names_crate(&code("// axum::serve is not used"), "axum"));
}

#[test]
fn layers_above_the_engine_reach_storage_only_through_it() {
    let root = workspace();
    for layer in ["host/mcp", "host/server"] {
        let krate = root.join(layer);
        for table in ["[dependencies]", "[dev-dependencies]"] {
            let text = std::fs::read_to_string(krate.join("Cargo.toml")).expect("a manifest");
            let declares = text
                .split(table)
                .nth(1)
                .map(|rest| rest.split("\n[").next().unwrap_or_default())
                .is_some_and(|deps| deps.lines().any(|l| l.trim().starts_with("tally-storage")));
            assert!(
                !declares,
                "{layer} declares tally-storage under {table}: use what `tally_engine::storage` gives"
            );
        }
        let mut files = Vec::new();
        for dir in ["src", "tests", "benches"] {
            collect_rs(&krate.join(dir), &mut files);
        }
        assert!(!files.is_empty(), "{layer}'s sources were read");
        for file in files {
            let text = code(&std::fs::read_to_string(&file).expect("a source file"));
            assert!(
                !names_crate(&text, "tally-storage"),
                "{} names tally_storage: use what `tally_engine::storage` gives (add it there if it is missing)",
                file.display()
            );
        }
    }
}

/// Every `.rs` file under `dir`.
pub(crate) fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Storage receives what a backend needs (columns, values, bounds: `Pushed`), as DataFusion's
/// `TableProvider` receives expressions: it names neither the request model nor the
/// resolved request, derives no answer schema, and keeps nothing of the layer above in it.
#[test]
fn storage_knows_no_request_and_no_answer() {
    let root = workspace();
    let mut files = Vec::new();
    collect_rs(&root.join("host/storage/src"), &mut files);
    assert!(files.len() > 10, "storage's files were found: {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = code(&std::fs::read_to_string(file).expect("source"));
        for forbidden in [
            "tally_semantic::request",
            "tally_semantic::resolve",
            "JsonSchema",
            "schemars",
            // A value of the layer above kept as an opaque box (DataFusion's `&dyn Any`
            // downcasts are not that).
            "Arc<dyn std::any::Any",
            "Arc<dyn Any",
        ] {
            if text.contains(forbidden) {
                found.push(format!("{}: {forbidden}", file.display()));
            }
        }
    }
    // Grouped imports too: `use tally_semantic::{request::Op, …}`.
    for file in &files {
        let text = code(&std::fs::read_to_string(file).expect("source"));
        for rest in after(&text, "tally_semantic::{") {
            let heads = group_heads(rest);
            for head in ["request", "resolve"] {
                if heads.iter().any(|h| h == head) {
                    found.push(format!("{}: tally_semantic::{{{head}…}}", file.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "storage names what is the engine's: {found:#?}"
    );
    let deps = declared(&root.join("host/storage/Cargo.toml"));
    assert!(
        !deps.contains("schemars"),
        "storage derives no schema: {deps:?}"
    );
}

/// The invariant ARCHITECTURE.md gives each crate, held on what its manifest declares: a crate
/// that must not know MCP, DataFusion, an async runtime, a plugin runtime or a layer above it
/// cannot use one without declaring it. Each invariant there names this test.
#[test]
fn each_crates_invariant_holds_on_what_it_declares() {
    let root = workspace();
    let mcp = ["rmcp", "axum"];
    let plugin_runtimes = ["wasmtime", "wasmtime-wasi", "libloading", "datafusion-ffi"];
    let host_crates = [
        "tally-semantic",
        "tally-storage",
        "tally-engine",
        "tally-mcp",
        "tally-plugin-host",
        "tally-ingest",
        "tally-chart",
        "tally-cluster",
        "tally",
    ];
    // (crate folder, what it must not declare, the invariant in words)
    let rules: &[(&str, Vec<&str>, &str)] = &[
        (
            "host/semantic",
            [&["datafusion", "tokio", "arrow", "parquet"][..], &mcp[..]].concat(),
            "no IO, no DataFusion, no MCP, no async",
        ),
        (
            "host/storage",
            [
                &mcp[..],
                &plugin_runtimes[..],
                &["tally-engine", "tally-mcp", "schemars"][..],
            ]
            .concat(),
            "knows no MCP, no plugin runtime, no layer above, no answer schema",
        ),
        (
            "host/engine",
            [
                &mcp[..],
                &plugin_runtimes[..],
                &["tally-mcp", "object_store", "notify"][..],
            ]
            .concat(),
            "knows no MCP, links no plugin runtime, reads no file itself",
        ),
        (
            "host/chart",
            [
                &mcp[..],
                &["datafusion", "tally-engine", "tally-storage"][..],
            ]
            .concat(),
            "reads a result envelope: no MCP, no DataFusion, no engine",
        ),
        (
            "host/ingest",
            [
                &mcp[..],
                &["datafusion", "tally-engine", "tally-storage"][..],
            ]
            .concat(),
            "never MCP or the query engine",
        ),
        (
            "host/cluster",
            [&mcp[..], &["tally-semantic", "tally-mcp"][..]].concat(),
            "knows Ballista and the engine's cluster types, never MCP or the semantic layer",
        ),
        (
            "host/server",
            [&mcp[..], &["datafusion", "tally-storage"][..]].concat(),
            "thin: no MCP and no query logic of its own",
        ),
        (
            "plugin-api",
            host_crates.to_vec(),
            "knows no host internals",
        ),
        (
            "plugins/parquet",
            host_crates.to_vec(),
            "knows nothing of the host",
        ),
    ];
    // The reader sees what the allowed crates do declare.
    assert!(declared(&root.join("host/mcp/Cargo.toml")).contains("rmcp"));
    assert!(declared(&root.join("host/plugin-host/Cargo.toml")).contains("wasmtime"));
    let mut broken = Vec::new();
    for (folder, forbidden, invariant) in rules {
        let deps = declared(&root.join(folder).join("Cargo.toml"));
        assert!(!deps.is_empty(), "{folder}'s dependencies were read");
        for name in forbidden {
            if deps.contains(*name) {
                broken.push(format!(
                    "{folder} declares {name}, against its invariant: {invariant}"
                ));
            }
        }
    }
    // Only the plugin host links a plugin runtime, only the MCP layer MCP, and nothing that
    // serves depends on the generator of the default dataset.
    for folder in crates(&root) {
        let manifest = folder.join("Cargo.toml");
        let deps = declared(&manifest);
        let name = folder
            .strip_prefix(&root)
            .unwrap_or(&folder)
            .display()
            .to_string();
        if name.starts_with("host/") && name != "host/plugin-host" {
            for runtime in plugin_runtimes {
                if deps.contains(runtime) {
                    broken.push(format!(
                        "{name} declares {runtime}: only host/plugin-host links a plugin runtime"
                    ));
                }
            }
        }
        if name != "host/mcp" && deps.contains("rmcp") {
            broken.push(format!("{name} declares rmcp: only host/mcp knows MCP"));
        }
        if name != "tools/synth" && deps.contains("tally-synth") {
            broken.push(format!(
                "{name} declares tally-synth: a build-time tool nothing depends on"
            ));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}
