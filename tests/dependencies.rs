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

/// Issue 12 item 8: the zeros stay zero. No `unsafe` in any target (a
/// Cargo lint), and the product's crates deny unwrap/expect/panic/indexing
/// outside tests, enforced by the CI's `cargo clippy -D warnings`.
#[test]
fn panic_free_lints_stay_on() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |path: &str| std::fs::read_to_string(format!("{root}/{path}")).unwrap();
    for manifest in ["Cargo.toml", "tests/maas-sim/Cargo.toml"] {
        assert!(
            read(manifest).contains("[lints.rust]\nunsafe_code = \"forbid\""),
            "{manifest} forbids unsafe code"
        );
    }
    for crate_root in ["src/lib.rs", "src/main.rs"] {
        let text = read(crate_root);
        let attribute = text
            .split("#![cfg_attr(")
            .nth(1)
            .and_then(|rest| rest.split(")]").next())
            .unwrap_or_else(|| panic!("{crate_root} has no cfg_attr lint block"));
        assert!(attribute.contains("not(test)"), "{crate_root}: {attribute}");
        for lint in [
            "clippy::unwrap_used",
            "clippy::expect_used",
            "clippy::panic",
            "clippy::indexing_slicing",
        ] {
            assert!(attribute.contains(lint), "{crate_root} denies {lint}");
        }
    }
}
