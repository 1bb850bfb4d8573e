//! The container image of `deploy/Dockerfile`, built and run the way a
//! release would be, with Debian's daemonless builder (buildah, `vfs`
//! storage, `chroot` isolation: no daemon, no overlay mounts), and checked
//! the way a security review checks an image: one layer holding one static
//! file, user 65532, the binary as entrypoint, no shell, and its size
//! (printed for BENCHMARKS.md).
//!
//! Skips, saying why, when not root (buildah's chroot isolation needs it;
//! CI runs as root) or when buildah, musl-gcc or the musl target are
//! missing; under `CI=true` that is a failure (`.ci/run` installs buildah,
//! musl-tools and the musl target). The static binary
//! is built by `deploy/build-static.sh` into its own target directory
//! (`target/image-build`, kept between runs), so this test never waits on
//! the cargo that runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[path = "support/skip.rs"]
mod skip;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Why this machine cannot build the image, if it cannot.
fn skip_reason() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root: buildah's chroot isolation needs root (CI runs as root)".into());
    }
    for (tool, package) in [("buildah", "buildah"), ("musl-gcc", "musl-tools")] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "{tool} not found (apt-get install {package}; .ci/run does)"
            ));
        }
    }
    let targets = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .ok()?;
    if !String::from_utf8_lossy(&targets.stdout).contains("x86_64-unknown-linux-musl") {
        return Some(
            "the x86_64-unknown-linux-musl target is not installed (rustup target add)".into(),
        );
    }
    None
}

/// buildah with this test's own storage, so nothing is left behind in the
/// machine's image store.
struct Buildah {
    storage: PathBuf,
}

impl Buildah {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("buildah")
            .arg("--root")
            .arg(self.storage.join("root"))
            .arg("--runroot")
            .arg(self.storage.join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .expect("buildah runs");
        assert!(
            output.status.success(),
            "buildah {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Buildah {
    fn drop(&mut self) {
        let _ = Command::new("buildah")
            .arg("--root")
            .arg(self.storage.join("root"))
            .arg("--runroot")
            .arg(self.storage.join("run"))
            .args(["--storage-driver", "vfs", "rm", "--all"])
            .output();
        let _ = std::fs::remove_dir_all(&self.storage);
    }
}

fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&entry.path(), &name, out);
        } else {
            out.push(name);
        }
    }
}

#[test]
fn image_builds_runs_and_passes_a_security_review() {
    if let Some(why) = skip_reason() {
        skip::skip("image_builds_runs_and_passes_a_security_review", &why);
        return;
    }
    let target_dir = root().join("target/image-build");
    let built = Command::new(root().join("deploy/build-static.sh"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .expect("deploy/build-static.sh runs");
    assert!(
        built.status.success(),
        "deploy/build-static.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let binary = target_dir.join("x86_64-unknown-linux-musl/release/capmaas");

    let work = std::env::temp_dir().join(format!("capmaas-image-test-{}", std::process::id()));
    let context = work.join("context");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::copy(&binary, context.join("capmaas")).unwrap();
    let buildah = Buildah {
        storage: work.join("storage"),
    };
    let image = "localhost/capmaas:image-test";
    let dockerfile = root().join("deploy/Dockerfile");
    buildah.run(&[
        "bud",
        "--isolation",
        "chroot",
        "--quiet",
        "-f",
        dockerfile.to_str().unwrap(),
        "-t",
        image,
        context.to_str().unwrap(),
    ]);

    // The image's configuration, as a registry and a kubelet see it.
    let inspect: Value =
        serde_json::from_str(&buildah.run(&["inspect", "--type", "image", image])).unwrap();
    let oci = &inspect["OCIv1"];
    assert_eq!(
        oci["config"]["User"], "65532:65532",
        "runs as the nonroot user"
    );
    assert_eq!(oci["config"]["Entrypoint"], serde_json::json!(["/capmaas"]));
    assert!(
        oci["config"]["Cmd"].is_null() || oci["config"]["Cmd"] == serde_json::json!([]),
        "no command beside the entrypoint: {}",
        oci["config"]["Cmd"]
    );
    let layers = oci["rootfs"]["diff_ids"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer: {layers:?}");
    assert_eq!(oci["os"], "linux");
    assert_eq!(oci["architecture"], "amd64");

    // Its filesystem: the one static binary, nothing else (no shell, no
    // libc, no package manager).
    let container = buildah.run(&["from", "--quiet", image]).trim().to_string();
    let mount = buildah.run(&["mount", &container]).trim().to_string();
    let mut files = Vec::new();
    files_under(Path::new(&mount), "", &mut files);
    assert_eq!(files, ["/capmaas"], "the image holds exactly one file");
    let bytes = std::fs::metadata(Path::new(&mount).join("capmaas"))
        .unwrap()
        .len();

    // It runs: the entrypoint answers --version as user 65532.
    let version = buildah.run(&[
        "run",
        "--isolation",
        "chroot",
        &container,
        "--",
        "/capmaas",
        "--version",
    ]);
    assert_eq!(
        version.trim(),
        format!("capmaas {}", env!("CARGO_PKG_VERSION"))
    );

    // What a registry stores: the manifest's layer (an uncompressed tar
    // here; a registry push may compress it) and the config blob.
    let manifest: Value = serde_json::from_str(inspect["Manifest"].as_str().unwrap()).unwrap();
    let layer = manifest["layers"][0]["size"].as_u64().unwrap();
    let config = manifest["config"]["size"].as_u64().unwrap();
    eprintln!(
        "image {image}: 1 layer of {layer} bytes + config {config} bytes = {:.2} MiB; \
         binary {bytes} bytes",
        (layer + config) as f64 / 1048576.0
    );
    assert!(
        layer < bytes + 64 * 1024,
        "the layer is the binary and a tar header"
    );
    assert!(bytes < 4 * 1024 * 1024, "the binary's budget is 4 MiB");
    drop(buildah);
    let _ = std::fs::remove_dir_all(&work);
}
