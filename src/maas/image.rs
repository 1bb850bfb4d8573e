//! "Does this image exist in MAAS?" with a helpful answer when it does not.
//!
//! Users write images as `custom/u-2204-0-k-1264-0`, `ubuntu/jammy` or just
//! `jammy`. MAAS ≤ 3.7 lists uploaded images without the `custom/` prefix,
//! newer MAAS keeps it, and bare names resolve against every OS. This module
//! hides those spellings so a controller can say "image X not found; did you
//! mean custom/Y?" before it asks MAAS to deploy.

use super::types::BootResource;

/// The verdict of [`check_image`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageCheck {
    /// Some deployable boot resource answers to the wanted name.
    pub exists: bool,
    /// The matching image in canonical form (`custom/<name>` or `<os>/<series>`).
    pub canonical: Option<String>,
    /// When it does not exist: up to three existing images (canonical form),
    /// closest first.
    pub closest: Vec<String>,
}

/// Ubuntu version numbers MAAS accepts as aliases of series names.
const UBUNTU_ALIASES: [(&str, &str); 5] = [
    ("18.04", "bionic"),
    ("20.04", "focal"),
    ("22.04", "jammy"),
    ("24.04", "noble"),
    ("26.04", "resolute"),
];

/// Bootloaders are boot resources too, but one cannot deploy them.
fn is_bootloader(os: &str) -> bool {
    os.starts_with("grub") || os.starts_with("pxelinux") || os.starts_with("uboot")
}

/// The canonical `os/series` of a boot resource, or None for bootloaders.
pub fn canonical_name(resource: &BootResource) -> Option<String> {
    let name = resource.name.trim();
    match name.split_once('/') {
        Some((os, _)) if is_bootloader(os) => None,
        Some(_) => Some(name.to_owned()),
        // No slash: an uploaded image whose `custom/` MAAS stripped.
        None if !name.is_empty() => Some(format!("custom/{name}")),
        None => None,
    }
}

/// Splits a user-written image into (os, series); a bare name has no os.
fn split(image: &str) -> (Option<&str>, &str) {
    match image.split_once('/') {
        Some((os, series)) => (Some(os), series),
        None => (None, image),
    }
}

fn unalias(series: &str) -> &str {
    UBUNTU_ALIASES
        .iter()
        .find(|(version, _)| *version == series)
        .map(|(_, name)| *name)
        .unwrap_or(series)
}

/// Checks `wanted` against the list from `GET boot-resources/`.
pub fn check_image(wanted: &str, resources: &[BootResource]) -> ImageCheck {
    let wanted = wanted.trim();
    let mut names: Vec<String> = resources.iter().filter_map(canonical_name).collect();
    names.sort();
    names.dedup();

    let (want_os, want_series) = split(wanted);
    let want_series = unalias(want_series);
    let found = names.iter().find(|name| {
        let (os, series) = split(name);
        let os = os.unwrap_or("custom");
        series == want_series && want_os.is_none_or(|w| w == os)
    });
    if let Some(name) = found {
        return ImageCheck {
            exists: true,
            canonical: Some(name.clone()),
            closest: Vec::new(),
        };
    }

    let wanted_lower = wanted.to_lowercase();
    let mut scored: Vec<(usize, &String)> = names
        .iter()
        .map(|name| {
            let (_, series) = split(name);
            // Score against both spellings so a missing or wrong prefix
            // costs nothing.
            let whole = levenshtein(&wanted_lower, &name.to_lowercase());
            let bare = levenshtein(&want_series.to_lowercase(), &series.to_lowercase());
            (whole.min(bare), name)
        })
        .collect();
    scored.sort();
    ImageCheck {
        exists: false,
        canonical: None,
        closest: scored.into_iter().take(3).map(|(_, n)| n.clone()).collect(),
    }
}

/// Characters of each name compared for suggestions: real image names are
/// a few dozen, and edit distance costs the product of both lengths (two
/// 10 KiB names took 13 s, found by tests/fuzz.rs; either may come from
/// outside: the MaasMachine spec or MAAS's list).
const MAX_COMPARED_CHARS: usize = 128;

fn levenshtein(a: &str, b: &str) -> usize {
    let a: String = a.chars().take(MAX_COMPARED_CHARS).collect();
    let b: Vec<char> = b.chars().take(MAX_COMPARED_CHARS).collect();
    // One row of the distance table at a time: `prev` for a's previous
    // character, built left to right into `cur`.
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let substitute = prev.get(j).map_or(usize::MAX, |d| d + cost);
            let delete = prev.get(j + 1).map_or(usize::MAX, |d| d + 1);
            let insert = cur.last().map_or(usize::MAX, |d| d + 1);
            cur.push(substitute.min(delete).min(insert));
        }
        prev = cur;
    }
    prev.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: &str, name: &str) -> BootResource {
        BootResource {
            kind: kind.into(),
            name: name.into(),
            architecture: "amd64/generic".into(),
            ..BootResource::default()
        }
    }

    fn inventory() -> Vec<BootResource> {
        vec![
            res("Synced", "grub-efi-signed/uefi"),
            res("Synced", "ubuntu/jammy"),
            res("Synced", "ubuntu/noble"),
            res("Uploaded", "u-2204-0-k-1264-0"),
            res("Uploaded", "custom/rhel9-gpu"),
        ]
    }

    #[test]
    fn finds_custom_images_with_or_without_prefix() {
        for wanted in ["custom/u-2204-0-k-1264-0", "u-2204-0-k-1264-0"] {
            let check = check_image(wanted, &inventory());
            assert!(check.exists, "{wanted}");
            assert_eq!(check.canonical.as_deref(), Some("custom/u-2204-0-k-1264-0"));
        }
        assert!(check_image("custom/rhel9-gpu", &inventory()).exists);
        assert!(check_image("rhel9-gpu", &inventory()).exists);
    }

    #[test]
    fn finds_ubuntu_by_series_path_and_version() {
        for wanted in ["ubuntu/jammy", "jammy", "22.04", "ubuntu/22.04"] {
            let check = check_image(wanted, &inventory());
            assert_eq!(check.canonical.as_deref(), Some("ubuntu/jammy"), "{wanted}");
        }
        assert!(!check_image("centos/jammy", &inventory()).exists);
    }

    /// A long name (from the spec or from MAAS) is compared by its start:
    /// the suggestion is still the right one, and the cost stays bounded.
    #[test]
    fn long_names_still_get_the_closest_suggestion() {
        let wanted = format!("u-2204-0-k-1264-x{}", "y".repeat(20_000));
        let mut resources = inventory();
        resources.push(res("Uploaded", &"z".repeat(20_000)));
        let check = check_image(&wanted, &resources);
        assert!(!check.exists);
        assert_eq!(check.closest[0], "custom/u-2204-0-k-1264-0");
    }

    #[test]
    fn bootloaders_are_not_images() {
        let check = check_image("grub-efi-signed/uefi", &inventory());
        assert!(!check.exists);
        assert!(!check.closest.iter().any(|n| n.starts_with("grub")));
    }

    #[test]
    fn suggests_closest_names() {
        let check = check_image("custom/u-2204-0-k-1265-0", &inventory());
        assert!(!check.exists);
        assert_eq!(check.closest[0], "custom/u-2204-0-k-1264-0");
        assert_eq!(check.closest.len(), 3);

        let check = check_image("ubuntu/u-2204-0-k-1264-0", &inventory());
        assert!(!check.exists, "wrong os prefix must not match");
        assert_eq!(check.closest[0], "custom/u-2204-0-k-1264-0");
    }
}
