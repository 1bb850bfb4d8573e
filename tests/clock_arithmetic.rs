//! Issue 19 item 1, the lint: `Instant + Duration` and `SystemTime +
//! Duration` panic on overflow, and the release build aborts on a panic.
//! Every point in time in `src/` is computed with `capmaas::clock::later`
//! (clamped) or `clock::system_later` (checked); this scan fails on any
//! other `+` of a time, naming the file and line.
//!
//! A time here is `Instant::now()`, `SystemTime::now()`, `UNIX_EPOCH`, a
//! `let` bound to one of the first two, or a field or parameter declared
//! `: Instant` / `: SystemTime` (or an `Option` of one) in the same file.
//! Test code (files named `tests.rs` or `*_tests.rs`, and a trailing
//! `#[cfg(test)] mod … {`) is not scanned.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The product part of a file: up to its test module.
fn product_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            break;
        }
        if !line.trim_start().starts_with("//") {
            out.push((i + 1, *line));
        }
    }
    out
}

/// The names that hold a time in this file.
fn time_names(lines: &[(usize, &str)]) -> Vec<String> {
    let mut names: Vec<String> = ["Instant::now()", "SystemTime::now()", "UNIX_EPOCH"]
        .map(String::from)
        .to_vec();
    for (_, line) in lines {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("let ") {
            let rest = rest.strip_prefix("mut ").unwrap_or(rest);
            if let Some((name, value)) = rest.split_once('=') {
                let value = value.trim();
                if value.starts_with("Instant::now()") || value.starts_with("SystemTime::now()") {
                    names.push(name.trim().to_string());
                }
            }
        }
        for ty in ["Instant", "SystemTime"] {
            for declared in [format!(": {ty}"), format!(": Option<{ty}>")] {
                let mut from = 0;
                while let Some(at) = line[from..].find(&declared) {
                    let at = from + at;
                    let end = at + declared.len();
                    from = end;
                    if line[end..].starts_with(is_ident) {
                        continue;
                    }
                    let name: String = line[..at]
                        .chars()
                        .rev()
                        .take_while(|c| is_ident(*c))
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    if !name.is_empty() {
                        names.push(name);
                    }
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// `name +` (or `name +=`) on the line, `name` not part of a longer name.
fn adds_to(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(at, _)| {
        let before_ok = !line[..at].ends_with(is_ident);
        let after = &line[at + name.len()..];
        let after_ok = !after.starts_with(is_ident);
        before_ok && after_ok && after.trim_start().starts_with('+')
    })
}

fn unchecked_time_additions(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = product_lines(&text);
        let names = time_names(&lines);
        for (number, line) in &lines {
            if names.iter().any(|n| adds_to(line, n)) {
                found.push(format!("{}:{number}: {}", file.display(), line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_time_in_src_is_added_to_without_a_check() {
    let found = unchecked_time_additions(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        found.is_empty(),
        "use capmaas::clock::later (or system_later) instead:\n{}",
        found.join("\n")
    );
}

/// The scan finds the forms the product had before issue 19.
#[test]
fn the_scan_finds_the_forms_it_forbids() {
    let dir = std::env::temp_dir().join(format!("clock-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("sample.rs"),
        "fn f(attempt: Instant, d: Duration) {\n\
         let now = Instant::now();\n\
         let due = now + d;\n\
         let deadline = Instant::now() + d;\n\
         gate.lead_until(attempt + d);\n\
         let t = UNIX_EPOCH + Duration::from_secs(1);\n\
         let fine = later(now, d) ;\n\
         let nowhere = nowadays + 1;\n\
         }\n\
         #[cfg(test)]\n\
         mod tests {\n\
         let x = Instant::now() + d;\n\
         }\n",
    )
    .unwrap();
    let found = unchecked_time_additions(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let lines: Vec<&str> = found
        .iter()
        .map(|f| f.rsplit_once(": ").unwrap().1)
        .collect();
    assert_eq!(
        lines,
        [
            "let due = now + d;",
            "let deadline = Instant::now() + d;",
            "gate.lead_until(attempt + d);",
            "let t = UNIX_EPOCH + Duration::from_secs(1);",
        ],
        "{found:#?}"
    );
}
