//! The dependency graph stays lean: one version of each small crate we and
//! our dependencies share, and a vendor note for every direct dependency.
//! Reads Cargo.lock and Cargo.toml, so it needs no network.

use std::collections::BTreeMap;

fn lock_versions() -> BTreeMap<String, Vec<String>> {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let Some(v) = line.strip_prefix("version = ") {
            if let Some(n) = name.take() {
                versions
                    .entry(n)
                    .or_default()
                    .push(v.trim_matches('"').to_string());
            }
        }
    }
    versions
}

/// Issue 12 item 10: getrandom and base64 were each in the graph twice (ours
/// and ring's/ureq's), and two hand-written percent-encoders sat beside the
/// `percent-encoding` crate.
#[test]
fn shared_crates_are_in_the_graph_once() {
    let versions = lock_versions();
    for name in ["getrandom", "base64", "percent-encoding"] {
        let found = versions.get(name).cloned().unwrap_or_default();
        assert_eq!(found.len(), 1, "{name}: versions {found:?} in Cargo.lock");
    }
}

#[test]
fn every_direct_dependency_has_a_vendor_note() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendor-notes/README.md"
    ))
    .unwrap();
    let versions = lock_versions();
    for line in deps.lines() {
        let Some((name, _)) = line.split_once(" = ") else {
            continue;
        };
        let name = name.trim();
        if name.starts_with('#') || name.is_empty() {
            continue;
        }
        let note = format!("{}/vendor-notes/{name}.md", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&note).unwrap_or_else(|_| panic!("{note} missing"));
        let locked = &versions[name][0];
        assert!(
            text.lines().next().unwrap_or("").contains(locked.as_str()),
            "{note} does not name the locked version {locked}"
        );
        assert!(
            readme.contains(&format!("[{name}]({name}.md) | {locked} |")),
            "vendor-notes/README.md: no row for {name} {locked}"
        );
    }
}
