//! The MAAS release a region runs (`GET version/`), for deploy options that
//! only newer MAAS understands. An older MAAS does not refuse an option it
//! does not know: it ignores it (3.4.8 reads only the parameters it knows),
//! so the caller must compare versions before it sends one.

use std::fmt;

use serde::Deserialize;

/// `{"capabilities": [...], "version": "3.4.8", "subversion": ""}`. Snap
/// and deb builds append a build tag: `3.5.4-16286-g.5b1e0ec23`,
/// `3.6.0~beta1`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VersionInfo {
    #[serde(default)]
    pub version: String,
    /// Empty since MAAS 2.x.
    #[serde(default)]
    pub subversion: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl VersionInfo {
    /// Whether this MAAS grants rights per resource pool through user
    /// groups and their entitlements (ReBAC, from MAAS 3.8 on).
    pub fn has_pool_entitlements(&self) -> bool {
        MaasVersion::parse(&self.version).is_some_and(|v| v >= MaasVersion::new(3, 8, 0))
    }

    /// The op that writes a machine's workload annotations on this MAAS:
    /// `set_workload_annotations` from 3.0 on, `set_owner_data` before. A
    /// version that is not a release number counts as the newest.
    pub fn annotations_op(&self) -> AnnotationsOp {
        match MaasVersion::parse(&self.version) {
            Some(v) if v < AnnotationsOp::RENAMED_IN => AnnotationsOp::SetOwnerData,
            _ => AnnotationsOp::SetWorkloadAnnotations,
        }
    }
}

/// How a machine's owner writes its key=value data. MAAS 3.0 renamed owner
/// data to workload annotations (canonical/maas 0a09e45a5, LP: #1928115):
/// `set_workload_annotations` and the machine's `workload_annotations`,
/// with `set_owner_data` and `owner_data` kept as deprecated aliases of the
/// same store (`OwnerData`, through 3.7 and main). Both ops merge the given
/// keys and delete those given empty; release clears the store. MAAS 2.x
/// has only `set_owner_data` and `owner_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnotationsOp {
    SetWorkloadAnnotations,
    SetOwnerData,
}

impl AnnotationsOp {
    /// The first release with `set_workload_annotations`.
    pub const RENAMED_IN: MaasVersion = MaasVersion::new(3, 0, 0);

    /// The `op=` MAAS knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            AnnotationsOp::SetWorkloadAnnotations => "set_workload_annotations",
            AnnotationsOp::SetOwnerData => "set_owner_data",
        }
    }
}

/// A MAAS release number: the `major.minor.patch` that starts the version
/// text (a missing part counts as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MaasVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl MaasVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> MaasVersion {
        MaasVersion {
            major,
            minor,
            patch,
        }
    }

    /// The release number at the start of `text`; None when it does not
    /// start with one (an empty or unexpected version string).
    pub fn parse(text: &str) -> Option<MaasVersion> {
        let release = text
            .trim()
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap_or("");
        let mut parts = release.split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let mut next = || parts.next().and_then(Result::ok).unwrap_or(0);
        let minor = next();
        let patch = next();
        Some(MaasVersion::new(major, minor, patch))
    }
}

impl fmt::Display for MaasVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_release_numbers_with_build_tags() {
        for (text, want) in [
            ("3.4.8", MaasVersion::new(3, 4, 8)),
            ("3.5.4-16286-g.5b1e0ec23", MaasVersion::new(3, 5, 4)),
            ("3.6.0~beta1", MaasVersion::new(3, 6, 0)),
            (" 3.6 ", MaasVersion::new(3, 6, 0)),
            ("4", MaasVersion::new(4, 0, 0)),
        ] {
            assert_eq!(MaasVersion::parse(text), Some(want), "{text}");
        }
        for text in ["", "unknown", "v3.4", ".4"] {
            assert_eq!(MaasVersion::parse(text), None, "{text}");
        }
    }

    #[test]
    fn orders_by_release() {
        assert!(MaasVersion::new(3, 4, 8) < MaasVersion::new(3, 6, 0));
        assert!(MaasVersion::new(3, 10, 0) > MaasVersion::new(3, 6, 0));
        assert!(MaasVersion::new(3, 2, 0) <= MaasVersion::new(3, 2, 0));
        assert_eq!(MaasVersion::new(3, 4, 8).to_string(), "3.4.8");
    }

    #[test]
    fn maas_versions_tell_when_pools_carry_rights() {
        for (v, entitlements) in [
            ("3.4.8", false),
            ("3.7.3", false),
            ("3.8.0~beta1", true),
            ("3.8.0-16000-g.abc", true),
            ("3.10.1", true),
            ("4.0.0", true),
            ("", false),
            ("unknown", false),
        ] {
            let info = VersionInfo {
                version: v.into(),
                subversion: String::new(),
                capabilities: Vec::new(),
            };
            assert_eq!(info.has_pool_entitlements(), entitlements, "{v}");
        }
    }

    #[test]
    fn workload_annotations_are_written_with_the_op_the_release_has() {
        for (v, op) in [
            ("2.9.2", AnnotationsOp::SetOwnerData),
            ("2.9.3~rc1", AnnotationsOp::SetOwnerData),
            ("3.0.0~rc1", AnnotationsOp::SetWorkloadAnnotations),
            ("3.0.0", AnnotationsOp::SetWorkloadAnnotations),
            ("3.4.8", AnnotationsOp::SetWorkloadAnnotations),
            (
                "3.5.4-16286-g.5b1e0ec23",
                AnnotationsOp::SetWorkloadAnnotations,
            ),
            ("", AnnotationsOp::SetWorkloadAnnotations),
            ("unknown", AnnotationsOp::SetWorkloadAnnotations),
        ] {
            let info = VersionInfo {
                version: v.into(),
                subversion: String::new(),
                capabilities: Vec::new(),
            };
            assert_eq!(info.annotations_op(), op, "{v}");
        }
        assert_eq!(
            AnnotationsOp::SetWorkloadAnnotations.as_str(),
            "set_workload_annotations"
        );
        assert_eq!(AnnotationsOp::SetOwnerData.as_str(), "set_owner_data");
    }
}
