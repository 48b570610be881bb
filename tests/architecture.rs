//! The module graph drawn in ARCHITECTURE.md holds in the code: every module of `src/` uses
//! (by a `crate::` path) only modules of its own layer or of the layers above it, the first
//! layer's modules use none, and the modules form no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers of ARCHITECTURE.md's "Module graph", top first: the modules named on each
/// numbered line.
fn layers(root: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let graph = text
        .split("## Module graph")
        .nth(1)
        .expect("a Module graph section");
    let graph = graph.split("\n## ").next().unwrap();
    let mut layers: Vec<Vec<String>> = Vec::new();
    for line in graph.lines() {
        let numbered = line
            .split_once(". ")
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if numbered {
            layers.push(Vec::new());
        } else if !line.starts_with("   ") {
            // Only the numbered lines and their indented continuations name layers.
            if layers.is_empty() { continue } else { break }
        }
        let layer = layers.last_mut().unwrap();
        for name in line.split('`').skip(1).step_by(2) {
            let is_module = root.join("src").join(format!("{name}.rs")).is_file()
                || root.join("src").join(name).is_dir();
            if is_module && !layer.iter().any(|n| n == name) {
                layer.push(name.to_owned());
            }
        }
    }
    layers
}

/// The top-level modules each module uses: `crate::x` paths outside comments.
fn uses(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let walker = ignore::WalkBuilder::new(root.join("src")).build();
    for entry in walker.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(root.join("src")).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let code: String = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let used = edges.entry(module.clone()).or_default();
        for rest in code.split("crate::").skip(1) {
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap().split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    used.insert(name);
                }
            }
        }
    }
    edges
}

#[test]
fn modules_use_only_their_layer_and_the_layers_above_and_form_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layers = layers(root);
    assert!(layers.len() >= 5, "layers found: {layers:?}");
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.as_str(), i)))
        .collect();
    let edges = uses(root);
    let mut wrong = Vec::new();
    for (module, used) in &edges {
        let Some(&own) = layer_of.get(module.as_str()) else {
            wrong.push(format!("{module} is in no layer of ARCHITECTURE.md"));
            continue;
        };
        for other in used {
            match layer_of.get(other.as_str()) {
                Some(&layer) if layer > own => wrong.push(format!(
                    "{module} (layer {}) uses {other} (layer {})",
                    own + 1,
                    layer + 1
                )),
                _ => {}
            }
        }
    }
    // The first layer are leaves: they use no other module at all.
    for leaf in &layers[0] {
        let used: Vec<_> = edges.get(leaf).into_iter().flatten().collect();
        let modules: Vec<_> = used
            .iter()
            .filter(|m| layer_of.contains_key(m.as_str()))
            .collect();
        if !modules.is_empty() {
            wrong.push(format!("{leaf} is a leaf but uses {modules:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // No cycle, within a layer either: a depth-first search finds no back edge.
    fn visit<'a>(
        m: &'a str,
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, bool>,
        path: &mut Vec<&'a str>,
    ) {
        match state.get(m) {
            Some(true) => return,
            Some(false) => panic!("a cycle: {} -> {m}", path.join(" -> ")),
            None => {}
        }
        state.insert(m, false);
        path.push(m);
        for next in edges.get(m).into_iter().flatten() {
            visit(next, edges, state, path);
        }
        path.pop();
        state.insert(m, true);
    }
    let mut state = BTreeMap::new();
    for module in edges.keys() {
        visit(module, &edges, &mut state, &mut Vec::new());
    }
}

/// Every `.rs` file of `src/`: its path from the crate root and its text.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let walker = ignore::WalkBuilder::new(root.join("src")).build();
    walker
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            (rel, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect()
}

/// Every way into a turn enters at the turn's first stage: the model loop is started by one
/// place only, the built-in `run_model` stage, and only the turn module calls the stages.
#[test]
fn only_the_turn_pipeline_runs_the_model_loop() {
    let mut starters = BTreeSet::new();
    for (rel, text) in sources() {
        if text.contains("ModelLoop::new(") {
            starters.insert(format!("{rel}: ModelLoop::new"));
        }
        if text.contains("turn::process(") {
            starters.insert(format!("{rel}: turn::process"));
        }
    }
    assert_eq!(
        starters.into_iter().collect::<Vec<_>>(),
        [
            "src/agent/mod.rs: turn::process",
            "src/agent/subagent.rs: turn::process",
            "src/agent/turn/builtin.rs: ModelLoop::new",
        ]
    );
}

/// Every queue is bounded: no unbounded channel anywhere in `src/`.
#[test]
fn every_queue_is_bounded() {
    let unbounded: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| text.contains("unbounded_channel") || text.contains("UnboundedSender"))
        .map(|(rel, _)| rel)
        .collect();
    assert_eq!(unbounded, Vec::<String>::new());
}

/// One runtime, the process's: only `main.rs` builds one and blocks on it (and `bub init`'s
/// probe, which runs before any other); nothing else in `src/` waits for async work by
/// blocking a thread.
#[test]
fn only_main_builds_a_runtime_and_blocks_on_it() {
    let mut found = BTreeSet::new();
    for (rel, text) in sources() {
        for what in ["block_on", "runtime::Builder", "runtime::Runtime::new"] {
            if text.contains(what) {
                found.insert(format!("{rel}: {what}"));
            }
        }
    }
    let allowed = ["src/main.rs", "src/cli/init/probe.rs"];
    found.retain(|f| !allowed.iter().any(|a| f.starts_with(&format!("{a}: "))));
    assert_eq!(found, BTreeSet::new());
}

/// The visibility rule: a `pub` item of the library is named outside it (by `main.rs`, a test,
/// a bench or an example) or shown by a public part of the library (a `pub` line — a
/// signature, a field, a `pub use` —, a line of a `pub trait` or `pub enum`, a type alias);
/// everything else is `pub(crate)` or private, so the compiler finds what is dead.
#[test]
fn what_only_the_library_uses_is_not_pub() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let words = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut outside = BTreeSet::new();
    for dir in ["tests", "benches", "examples"] {
        for entry in ignore::WalkBuilder::new(root.join(dir)).build().flatten() {
            if entry.path().extension().is_some_and(|x| x == "rs") {
                outside.extend(words(&std::fs::read_to_string(entry.path()).unwrap()));
            }
        }
    }
    let (main, library): (Vec<_>, Vec<_>) = sources()
        .into_iter()
        .partition(|(rel, _)| rel == "src/main.rs");
    outside.extend(main.iter().flat_map(|(_, text)| words(text)));
    // The item a line defines as `pub`: its name.
    let defined = |line: &str| -> Option<String> {
        let rest = line.trim_start().strip_prefix("pub ")?;
        let rest = rest
            .trim_start_matches("async ")
            .trim_start_matches("unsafe ");
        let (kind, rest) = rest.split_once(' ')?;
        let kinds = ["fn", "struct", "enum", "trait", "type", "const", "static"];
        let name = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()?;
        kinds.contains(&kind).then(|| name.to_owned())
    };
    let mut shown = BTreeSet::new();
    for (_, text) in &library {
        // Brace depth inside the `pub trait` or `pub enum` being read; a `pub use` or a `pub`
        // signature going on (to its `;`, or to the `{` of its body).
        let (mut depth, mut using, mut signing) = (0i32, false, false);
        for line in text.lines() {
            let trimmed = line.trim_start();
            let opens = depth == 0
                && (trimmed.starts_with("pub trait ") || trimmed.starts_with("pub enum "));
            // A type alias is shown wherever it is used.
            let alias = trimmed.starts_with("pub(crate) type ") || trimmed.starts_with("type ");
            if opens || depth > 0 || using || signing || alias || trimmed.starts_with("pub ") {
                let mut named = words(line);
                if let Some(own) = defined(line) {
                    named.remove(&own);
                }
                shown.extend(named);
            }
            if opens || depth > 0 {
                depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            }
            using = (using || trimmed.starts_with("pub use ")) && !line.contains(';');
            signing = (signing || defined(line).is_some() && !opens) && !line.contains(['{', ';']);
        }
    }
    let mut hidden = Vec::new();
    for (rel, text) in &library {
        for (at, line) in text.lines().enumerate() {
            if let Some(name) = defined(line)
                && !outside.contains(&name)
                && !shown.contains(&name)
            {
                hidden.push(format!("{rel}:{}: {name}", at + 1));
            }
        }
    }
    assert!(
        hidden.is_empty(),
        "pub, but neither used outside the library nor shown by its public parts \
         (make them pub(crate)):\n{}",
        hidden.join("\n")
    );
}
