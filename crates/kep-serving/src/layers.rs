//! The layers of the crate, kept: a module uses only its own layer and those below it
//! (README, Layout). Each `crate::…` path in the sources is read, the `use` lists too.

use std::path::Path;

/// The modules by layer, lowest first: the API over the control plane, which drives the
/// monitor, the runtime and the store; under all, the stored document, the ids, the kinds,
/// the settings, the errors and the container engine.
const LAYERS: &[&[&str]] = &[
    &[
        "deployment",
        "ids",
        "kinds",
        "settings",
        "error",
        "engine",
        "metrics",
    ],
    &["store"],
    &["runtime"],
    &["monitor"],
    &["control"],
    &["api"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The first names of the paths after each `crate::` in `text`.
fn crate_paths(text: &str) -> Vec<&str> {
    let name = |path: &str| -> usize {
        path.find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(path.len())
    };
    text.match_indices("crate::")
        .flat_map(|(at, _)| {
            let rest = &text[at + "crate::".len()..];
            match rest.strip_prefix('{') {
                Some(list) => list[..list.find('}').unwrap_or(list.len())]
                    .split(',')
                    .map(str::trim)
                    .map(|path| &path[..name(path)])
                    .collect(),
                None => vec![&rest[..name(rest)]],
            }
        })
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut above = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        if matches!(module, "lib" | "layers") {
            continue;
        }
        let own = layer(module).unwrap_or_else(|| panic!("{module} is in no layer: add it"));
        let text = std::fs::read_to_string(&file).unwrap();
        for name in crate_paths(&text) {
            if layer(name).is_some_and(|l| l > own) {
                above.push(format!("{} uses crate::{name}", relative.display()));
            }
        }
    }
    assert!(above.is_empty(), "{above:#?}");
}

#[test]
fn paths_are_read_in_use_lists_too() {
    assert_eq!(
        crate_paths("use crate::store::Store;\nuse crate::{ServingError, control::Control};"),
        ["store", "ServingError", "control"]
    );
}
