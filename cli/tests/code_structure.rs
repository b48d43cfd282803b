//! Structure rules of the source tree (issue 31), checked on the sources themselves so
//! that they stay true:
//!
//! 1. no function longer than 300 lines in `formats`, `compiler` and `runtime`
//!    (generated code excluded);
//! 2. no file of `formats/src/nn` longer than 1,000 lines;
//! 3. no import cycle between the modules of `formats` (test-only code excluded);
//! 4. no `match` over operation types (one whose arms name `OperationType` variants)
//!    with a catch-all arm (`_`, a bare binding such as `other`, or a tuple of those),
//!    so that a new `OperationType` fails to compile until every match handles it.
//!    `matches!` is a test, not a match, and is allowed.
//! 5. every `unsafe fn` (free, method, trait method with a body) in the library crates
//!    has a doc comment with a `# Safety` section saying what its callers must
//!    guarantee (clippy's `missing_safety_doc` checks public functions only).
//!
//! The test lives in the CLI crate, on top of the dependency graph, and reads the other
//! crates' files (not the crates) relative to its manifest directory. Each rule reports
//! every violation with its file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Expr, Pat, Token, UseTree};

const MAX_FN_LINES: usize = 300;
const MAX_NN_FILE_LINES: usize = 1_000;

/// Generated files, excluded from the function-length rule. Files whose header says
/// they are generated are excluded as well (see `is_generated`).
const GENERATED: &[&str] = &[
    "compiler/src/tflite/schema_generated.rs",
    "compiler/src/onnx/versions.rs",
];

/// A parsed source file, named by its path from the workspace root.
struct Source {
    rel: String,
    text: String,
    ast: syn::File,
}

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Every `.rs` file under `dir` (relative to the workspace root), parsed, in path order.
fn sources(dir: &str) -> Vec<Source> {
    let root = workspace();
    let mut paths = Vec::new();
    collect_rs(&root.join(dir), &mut paths);
    paths.sort();
    assert!(!paths.is_empty(), "no Rust files under {dir}");
    paths
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(&root)
                .expect("under the workspace")
                .to_string_lossy()
                .replace('\\', "/");
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
            let ast = syn::parse_file(&text).unwrap_or_else(|e| {
                let at = e.span().start();
                panic!("parsing {rel}:{}:{}: {e}", at.line, at.column + 1)
            });
            Source { rel, text, ast }
        })
        .collect()
}

fn is_generated(src: &Source) -> bool {
    if GENERATED.contains(&src.rel.as_str()) {
        return true;
    }
    let header = src
        .text
        .lines()
        .take(10)
        .collect::<Vec<_>>()
        .join("\n")
        .to_lowercase();
    header.contains("@generated")
        || (header.contains("generated") && header.contains("do not edit"))
}

fn line(span: Span) -> usize {
    span.start().line
}

/// A rule broken at `file:line`.
struct Violation {
    file: String,
    line: usize,
    what: String,
}

/// Panics with every violation, one per line in file and line order, if there are any.
fn report(rule: &str, mut violations: Vec<Violation>) {
    violations.sort_by(|a, b| (&a.file, a.line, &a.what).cmp(&(&b.file, b.line, &b.what)));
    let lines: Vec<String> = violations
        .iter()
        .map(|v| format!("{}:{}: {}", v.file, v.line, v.what))
        .collect();
    assert!(
        lines.is_empty(),
        "{rule}: {} violation(s)\n  {}",
        lines.len(),
        lines.join("\n  ")
    );
}

/// Whether an item is compiled for tests only (`#[cfg(test)]`).
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name of a type, for naming methods: the last segment of a path type.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(|| "?".to_owned(), |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "?".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Rule 1: function length.

/// Records every function with a body (free, method, trait default, nested), with the
/// number of lines from its `fn` keyword to its closing brace.
struct FnLengths {
    impl_of: Vec<String>,
    found: Vec<(String, usize, usize)>,
}

impl FnLengths {
    fn record(&mut self, name: &syn::Ident, fn_token: Span, close: Span) {
        let (start, end) = (line(fn_token), close.end().line);
        let name = match self.impl_of.last() {
            Some(ty) => format!("{ty}::{name}"),
            None => name.to_string(),
        };
        self.found.push((name, start, end + 1 - start));
    }
}

impl<'ast> Visit<'ast> for FnLengths {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        // A function nested in a method is not itself a method.
        let outer = std::mem::take(&mut self.impl_of);
        self.record(
            &f.sig.ident,
            f.sig.fn_token.span,
            f.block.brace_token.span.close(),
        );
        visit::visit_item_fn(self, f);
        self.impl_of = outer;
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.impl_of.push(type_name(&i.self_ty));
        visit::visit_item_impl(self, i);
        self.impl_of.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.impl_of.push(t.ident.to_string());
        visit::visit_item_trait(self, t);
        self.impl_of.pop();
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.record(
            &f.sig.ident,
            f.sig.fn_token.span,
            f.block.brace_token.span.close(),
        );
        visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.record(
                &f.sig.ident,
                f.sig.fn_token.span,
                body.brace_token.span.close(),
            );
        }
        visit::visit_trait_item_fn(self, f);
    }
}

#[test]
fn no_function_over_300_lines() {
    let mut violations = Vec::new();
    let mut seen = 0;
    for dir in ["formats/src", "compiler/src", "runtime/src"] {
        for src in sources(dir).iter().filter(|s| !is_generated(s)) {
            let mut v = FnLengths {
                impl_of: Vec::new(),
                found: Vec::new(),
            };
            v.visit_file(&src.ast);
            seen += v.found.len();
            for (name, start, lines) in v.found {
                if lines > MAX_FN_LINES {
                    violations.push(Violation {
                        file: src.rel.clone(),
                        line: start,
                        what: format!("`{name}` has {lines} lines"),
                    });
                }
            }
        }
    }
    // Guards the scanner itself: these crates hold thousands of functions.
    assert!(seen > 1_000, "only {seen} functions found");
    report(
        &format!("functions over {MAX_FN_LINES} lines (formats, compiler, runtime)"),
        violations,
    );
}

// ---------------------------------------------------------------------------------------
// Rule 2: file length in formats/src/nn.

#[test]
fn no_nn_file_over_1000_lines() {
    let violations = sources("formats/src/nn")
        .iter()
        .filter_map(|src| {
            let lines = src.text.lines().count();
            (lines > MAX_NN_FILE_LINES).then(|| Violation {
                file: src.rel.clone(),
                line: 1,
                what: format!("{lines} lines"),
            })
        })
        .collect();
    report(
        &format!("files of formats/src/nn over {MAX_NN_FILE_LINES} lines"),
        violations,
    );
}

// ---------------------------------------------------------------------------------------
// Rule 3: import cycles between the modules of formats.

/// A module's path below the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// The module a file defines: `lib.rs` the root, `a/mod.rs` and `a.rs` the module `a`.
fn file_module(rel_in_src: &str) -> ModPath {
    let stem = rel_in_src.trim_end_matches(".rs");
    let mut parts: ModPath = stem.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// A reference from module `from` to the absolute path `to`, at `line` of `file`.
struct Reference {
    from: ModPath,
    to: ModPath,
    file: String,
    line: usize,
}

/// Collects the `crate::`, `super::` and `self::` paths of one file (in `use` items, in
/// code and in macro bodies), resolved to absolute paths, and the inline modules.
struct ModRefs<'a> {
    file: &'a str,
    module: ModPath,
    refs: Vec<Reference>,
    inline_modules: Vec<ModPath>,
}

impl ModRefs<'_> {
    /// Resolves a path relative to the current module; `None` for paths that do not
    /// start at `crate`, `super` or `self` (other crates, local names).
    fn resolve(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let (mut base, rest) = match first.as_str() {
            "crate" | "$crate" => (Vec::new(), &segments[1..]),
            "self" => (self.module.clone(), &segments[1..]),
            "super" => {
                let mut base = self.module.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                (base, rest)
            }
            _ => return None,
        };
        base.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(base)
    }

    fn add(&mut self, segments: &[String], span: Span) {
        if let Some(to) = self.resolve(segments) {
            self.refs.push(Reference {
                from: self.module.clone(),
                to,
                file: self.file.to_owned(),
                line: line(span),
            });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.add(prefix, n.ident.span());
                prefix.pop();
            }
            UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.add(prefix, r.ident.span());
                prefix.pop();
            }
            UseTree::Glob(g) => self.add(prefix, g.star_token.span),
            UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Finds `crate::a::b`-like paths in a macro's tokens, which syn does not parse.
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id)
                    if ["crate", "super", "self"].contains(&id.to_string().as_str()) =>
                {
                    let span = id.span();
                    let mut segments = vec![id.to_string()];
                    i += 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tts.get(i), tts.get(i + 1), tts.get(i + 2))
                    {
                        if a.as_char() != ':' || a.spacing() != Spacing::Joint || b.as_char() != ':'
                        {
                            break;
                        }
                        segments.push(next.to_string());
                        i += 3;
                    }
                    if segments.len() > 1 {
                        self.add(&segments, span);
                    }
                }
                _ => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for ModRefs<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        // Test code may use any module's helpers; the rule is about the library's layers.
        if !is_cfg_test(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            self.inline_modules.push(self.module.clone());
            visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            if segments.len() > 1 {
                let span = p
                    .segments
                    .first()
                    .map_or_else(Span::call_site, |s| s.ident.span());
                self.add(&segments, span);
            }
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        visit::visit_macro(self, m);
    }
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                connect(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            connect(&mut s, v);
        }
    }
    s.out
}

fn module_name(m: &[String]) -> String {
    std::iter::once("crate")
        .chain(m.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

#[test]
fn no_import_cycle_between_formats_modules() {
    let srcs = sources("formats/src");
    let mut modules: BTreeSet<ModPath> = BTreeSet::new();
    let mut refs = Vec::new();
    for src in &srcs {
        let module = file_module(src.rel.trim_start_matches("formats/src/"));
        modules.insert(module.clone());
        let mut v = ModRefs {
            file: &src.rel,
            module,
            refs: Vec::new(),
            inline_modules: Vec::new(),
        };
        v.visit_file(&src.ast);
        modules.extend(v.inline_modules);
        refs.extend(v.refs);
    }

    // A reference makes an edge between the two sibling modules directly under the
    // common parent of its source and its target (`nn::signature` -> `nn::validate`
    // for `crate::nn::validate::f` used in `nn::signature::tests`). References to an
    // ancestor, to a descendant, or to an item of the common parent make none.
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let mut evidence: BTreeMap<(ModPath, ModPath), BTreeSet<(String, usize)>> = BTreeMap::new();
    for r in &refs {
        let common = r.from.iter().zip(&r.to).take_while(|(a, b)| a == b).count();
        if common >= r.from.len() || common >= r.to.len() {
            continue;
        }
        let (a, b) = (r.from[..=common].to_vec(), r.to[..=common].to_vec());
        if !modules.contains(&b) {
            continue;
        }
        graph.entry(a.clone()).or_default().insert(b.clone());
        evidence
            .entry((a, b))
            .or_default()
            .insert((r.file.clone(), r.line));
    }
    assert!(
        graph.values().map(BTreeSet::len).sum::<usize>() > 10,
        "the module graph of formats has almost no edges: the scanner is broken"
    );

    let violations = cycles(&graph)
        .into_iter()
        .map(|component| {
            let names: Vec<String> = component.iter().map(|m| module_name(m)).collect();
            let mut what = format!("import cycle between {}:", names.join(", "));
            let mut first: Option<(String, usize)> = None;
            for a in &component {
                for b in graph[a].iter().filter(|b| component.contains(b)) {
                    let at = &evidence[&(a.clone(), b.clone())];
                    if let Some(loc) = at.first()
                        && first.as_ref().is_none_or(|f| loc < f)
                    {
                        first = Some(loc.clone());
                    }
                    let shown: Vec<String> =
                        at.iter().take(5).map(|(f, l)| format!("{f}:{l}")).collect();
                    let more = match at.len() {
                        n if n > 5 => format!(" and {} more", n - 5),
                        _ => String::new(),
                    };
                    what.push_str(&format!(
                        "\n      {} -> {} at {}{more}",
                        module_name(a),
                        module_name(b),
                        shown.join(", ")
                    ));
                }
            }
            let (file, line) = first.unwrap_or_default();
            Violation { file, line, what }
        })
        .collect();
    report("import cycles between modules of formats", violations);
}

// ---------------------------------------------------------------------------------------
// Rule 4: matches over operation types end without a catch-all arm.

/// Whether a pattern names a variant of `OperationType` (through one of `names`: the
/// type, its aliases in the file, and `Self` in its own impl blocks).
struct NamesOperation<'a> {
    names: &'a BTreeSet<String>,
    found: bool,
}

impl<'ast> Visit<'ast> for NamesOperation<'_> {
    // A guard (`e if op == OperationType::While`) does not make a match one over
    // operation types.
    fn visit_pat_guard(&mut self, g: &'ast syn::PatGuard) {
        self.visit_pat(&g.pat);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let n = p.segments.len();
        if n >= 2 && self.names.contains(&p.segments[n - 2].ident.to_string()) {
            self.found = true;
        }
        visit::visit_path(self, p);
    }
}

/// `Some` with a description if the pattern matches every value: `_`, a binding, or a
/// tuple of those.
fn catch_all(pat: &Pat) -> Option<String> {
    match pat {
        Pat::Wild(_) => Some("`_`".to_owned()),
        Pat::Ident(i) => match &i.subpat {
            Some((_, sub)) => catch_all(sub),
            None => {
                let name = i.ident.to_string();
                name.starts_with(|c: char| c.is_lowercase() || c == '_')
                    .then(|| format!("binding `{name}`"))
            }
        },
        Pat::Paren(p) => catch_all(&p.pat),
        Pat::Reference(r) => catch_all(&r.pat),
        Pat::Or(o) => o.cases.iter().find_map(catch_all),
        Pat::Tuple(t) => t
            .elems
            .iter()
            .all(|e| matches!(e, Pat::Rest(_)) || catch_all(e).is_some())
            .then(|| "tuple of `_`".to_owned()),
        _ => None,
    }
}

struct OperationMatches<'a> {
    file: &'a str,
    aliases: &'a BTreeSet<String>,
    in_operation_impl: Vec<bool>,
    found: usize,
    violations: Vec<Violation>,
}

impl<'ast> Visit<'ast> for OperationMatches<'_> {
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.in_operation_impl
            .push(type_name(&i.self_ty) == "OperationType");
        visit::visit_item_impl(self, i);
        self.in_operation_impl.pop();
    }

    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        let mut names = self.aliases.clone();
        if self.in_operation_impl.last() == Some(&true) {
            names.insert("Self".to_owned());
        }
        let mut probe = NamesOperation {
            names: &names,
            found: false,
        };
        for arm in &m.arms {
            probe.visit_pat(&arm.pat);
        }
        if probe.found {
            self.found += 1;
            for arm in &m.arms {
                if let Some(what) = catch_all(&arm.pat) {
                    self.violations.push(Violation {
                        file: self.file.to_owned(),
                        line: line(arm.fat_arrow_token.spans[0]),
                        what: format!(
                            "catch-all arm {what} in a match over operation types (line {})",
                            line(m.match_token.span)
                        ),
                    });
                }
            }
        }
        visit::visit_expr_match(self, m);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // `matches!` is a test, not a match; other macros' arguments may hold matches.
        let is_matches = mac
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "matches");
        if !is_matches
            && let Ok(args) = mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
        {
            for arg in &args {
                self.visit_expr(arg);
            }
        }
        visit::visit_macro(self, mac);
    }
}

/// `OperationType` and the names it is imported under (`use ...::OperationType as O`).
struct Aliases(BTreeSet<String>);

impl<'ast> Visit<'ast> for Aliases {
    fn visit_use_rename(&mut self, r: &'ast syn::UseRename) {
        if r.ident == "OperationType" {
            self.0.insert(r.rename.to_string());
        }
    }
}

#[test]
fn no_catch_all_arm_in_matches_over_operation_types() {
    let mut violations = Vec::new();
    let mut found = 0;
    for dir in [
        "formats/src",
        "compiler/src",
        "runtime/src",
        "runtime/capi/src",
        "cli/src",
    ] {
        for src in sources(dir).iter().filter(|s| !is_generated(s)) {
            let mut aliases = Aliases(BTreeSet::from(["OperationType".to_owned()]));
            aliases.visit_file(&src.ast);
            let mut v = OperationMatches {
                file: &src.rel,
                aliases: &aliases.0,
                in_operation_impl: Vec::new(),
                found: 0,
                violations: Vec::new(),
            };
            v.visit_file(&src.ast);
            found += v.found;
            violations.extend(v.violations);
        }
    }
    // Guards the scanner itself: the schema table (formats/src/nn/ops/mod.rs) and the
    // kernel dispatch (runtime/src/kernels/mod.rs) are matches over operations.
    assert!(
        found >= 2,
        "only {found} matches over operation types found"
    );
    report(
        "matches over operation types with a catch-all arm",
        violations,
    );
}

// ---------------------------------------------------------------------------------------
// Rule 5: every `unsafe fn` documents its callers' obligations.

/// Whether the doc comment among `attrs` has a line `# Safety`.
fn has_safety_section(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => matches!(
            &nv.value,
            Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. })
                if s.value().lines().any(|l| l.trim() == "# Safety")
        ),
        _ => false,
    })
}

/// Records every `unsafe fn` with a body and whether its doc has a `# Safety` section.
struct UnsafeFns<'a> {
    file: &'a str,
    impl_of: Vec<String>,
    found: usize,
    violations: Vec<Violation>,
}

impl UnsafeFns<'_> {
    fn check(&mut self, attrs: &[syn::Attribute], sig: &syn::Signature) {
        if !matches!(sig.safety, syn::Safety::Unsafe(_)) {
            return;
        }
        self.found += 1;
        if !has_safety_section(attrs) {
            let name = match self.impl_of.last() {
                Some(ty) => format!("{ty}::{}", sig.ident),
                None => sig.ident.to_string(),
            };
            self.violations.push(Violation {
                file: self.file.to_owned(),
                line: line(sig.fn_token.span),
                what: format!("`unsafe fn {name}` has no `# Safety` section in its doc"),
            });
        }
    }
}

impl<'ast> Visit<'ast> for UnsafeFns<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let outer = std::mem::take(&mut self.impl_of);
        self.check(&f.attrs, &f.sig);
        visit::visit_item_fn(self, f);
        self.impl_of = outer;
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.impl_of.push(type_name(&i.self_ty));
        visit::visit_item_impl(self, i);
        self.impl_of.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.impl_of.push(t.ident.to_string());
        visit::visit_item_trait(self, t);
        self.impl_of.pop();
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.attrs, &f.sig);
        visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            self.check(&f.attrs, &f.sig);
        }
        visit::visit_trait_item_fn(self, f);
    }
}

#[test]
fn every_unsafe_fn_has_a_safety_section() {
    let mut violations = Vec::new();
    let mut found = 0;
    for dir in [
        "formats/src",
        "compiler/src",
        "runtime/src",
        "runtime/capi/src",
        "cli/src",
    ] {
        for src in sources(dir).iter().filter(|s| !is_generated(s)) {
            let mut v = UnsafeFns {
                file: &src.rel,
                impl_of: Vec::new(),
                found: 0,
                violations: Vec::new(),
            };
            v.visit_file(&src.ast);
            found += v.found;
            violations.extend(v.violations);
        }
    }
    // Guards the scanner itself: the SIMD kernels and the C API hold over a hundred.
    assert!(found >= 100, "only {found} unsafe functions found");
    report(
        "unsafe functions without a `# Safety` section in their doc",
        violations,
    );
}
