//! The doors to MAAS, kept by reading `src/` (issue 21): every write the
//! controllers make to a MAAS machine goes through `MaasView::write`, which
//! marks it in the MAAS watch's view before it is sent, so that a view
//! entry older than the write never stands in for a read (a second deploy
//! or power-on from a stale view). `MaasView::client()` hands out the
//! client itself for what the view neither answers nor must learn of.
//!
//! Text, not types: string literals and comments are blanked, then each
//! call is checked for the `.write(` around it.
//!
//! The rooms' doors, kept the same way (issue 21 items 2 and 4): the
//! reconcilers (`src/controllers/`) hold no client, not even a binding of
//! their ports (those live in the wiring); only the outside-system modules
//! (`kube/`, `maas/`, `serve/`), the wiring (`operator/`, with its
//! machinery `runtime/`) and the commands (`cli/`) make clients, open
//! connections or start threads; and only `cli/`, whose errors are
//! messages for a person, returns `Result<_, String>`.

use std::path::{Path, PathBuf};

/// `MaasApi` operations that change a machine.
const MACHINE_WRITES: [&str; 10] = [
    "deploy",
    "delete_machine",
    "release",
    "power_on_with_comment",
    "power_off_with_comment",
    "mark_broken",
    "update_machine",
    "set_annotations",
    "link_subnet_static",
    "unlink_subnet",
];

/// What `MaasView::client()` may be asked.
/// (`compose` makes a new machine: no view can hold it yet.)
const THROUGH_CLIENT: [&str; 9] = [
    "compose",
    "events",
    "machines",
    "vm_hosts",
    "zones",
    "subnets",
    "ip_reservations",
    "reserve_ip_marked",
    "release_ip",
];

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

/// The product code of the controllers: test files and `#[cfg(test)]`
/// modules (at the end of a file) left out. (`cli/doctor` releases orphans
/// with the client of a one-shot command, which keeps no view.)
fn controller_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controllers"),
        &mut files,
    );
    files
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            !name.ends_with("tests.rs") && !["fake.rs", "maas_view.rs"].contains(&name)
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let product = text.split("#[cfg(test)]").next().unwrap().to_string();
            (p, blank_strings_and_comments(&product))
        })
        .collect()
}

/// Strings and comments replaced by spaces (lengths kept).
fn blank_strings_and_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                out.push(' ');
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                    out.push(' ');
                }
            }
            '"' => {
                out.push(' ');
                while let Some(c) = chars.next() {
                    out.push(' ');
                    match c {
                        '\\' => {
                            chars.next();
                            out.push(' ');
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            // A char literal such as '(' or '"'; lifetimes ('a) pass.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let literal = rest.chars().nth(1) == Some('\'')
                    || (rest.starts_with('\\') && rest.chars().nth(2) == Some('\''));
                out.push(' ');
                if literal {
                    let skip = if rest.starts_with('\\') { 3 } else { 2 };
                    for _ in 0..skip {
                        chars.next();
                        out.push(' ');
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Byte offsets of `.name(` calls (with spaces or a line break allowed
/// before the dot and the parenthesis).
fn calls(text: &str, name: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(name) {
        let start = from + at;
        let end = start + name.len();
        from = end;
        let before = text[..start].trim_end();
        let after = text[end..].trim_start();
        let whole_word = !text[end..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if before.ends_with('.') && after.starts_with('(') && whole_word {
            found.push(start);
        }
    }
    found
}

/// Whether the call at `at` sits inside the arguments of a `.write(` call.
fn inside_write(text: &str, at: usize) -> bool {
    let mut depth = 0i32;
    for (i, c) in text[..at].char_indices().rev() {
        match c {
            ')' | '}' | ']' => depth += 1,
            '(' | '{' | '[' if depth > 0 => depth -= 1,
            '(' if text[..i].trim_end().ends_with(".write") => return true,
            _ => {}
        }
    }
    false
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

#[test]
fn every_machine_write_of_the_controllers_goes_through_the_view() {
    let mut outside = Vec::new();
    let mut seen = 0;
    for (path, text) in controller_sources() {
        for op in MACHINE_WRITES {
            for at in calls(&text, op) {
                // MAAS's take arguments; a Lease's `elector.release()` none.
                let args = text[at + op.len()..].trim_start()[1..].trim_start();
                if args.starts_with(')') {
                    continue;
                }
                seen += 1;
                if !inside_write(&text, at) {
                    outside.push(format!("{}:{} .{op}(", path.display(), line_of(&text, at)));
                }
            }
        }
    }
    assert!(seen >= 10, "the scan found only {seen} machine writes");
    assert!(
        outside.is_empty(),
        "machine writes not inside MaasView::write: {outside:#?}"
    );
}

#[test]
fn the_view_hands_out_its_client_only_for_what_it_need_not_learn_of() {
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (path, text) in controller_sources() {
        for at in calls(&text, "client") {
            let rest = text[at + "client".len()..].trim_start();
            let Some(rest) = rest.strip_prefix("()") else {
                continue;
            };
            seen += 1;
            let next: String = rest
                .trim_start()
                .trim_start_matches('.')
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !THROUGH_CLIENT.contains(&next.as_str()) {
                wrong.push(format!(
                    "{}:{} .client().{next}",
                    path.display(),
                    line_of(&text, at)
                ));
            }
        }
    }
    assert!(seen >= 4, "the scan found only {seen} uses of client()");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_scan_sees_a_write_outside_the_view() {
    let text = blank_strings_and_comments(
        "let m = r.maas()?.write(&id, |client| client.deploy(&id, &req))?;\n\
         r.maas()?.client().power_on_with_comment(&id, Some(\"(\"));\n",
    );
    let deploy = calls(&text, "deploy");
    let power_on = calls(&text, "power_on_with_comment");
    assert_eq!((deploy.len(), power_on.len()), (1, 1));
    assert!(inside_write(&text, deploy[0]));
    assert!(!inside_write(&text, power_on[0]));
}

/// The product code of every file under `src/<dir>`, by path relative to
/// `src/`: test files and `#[cfg(test)]` modules left out, strings and
/// comments blanked.
fn product_sources(dir: &str) -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            !name.ends_with("tests.rs") && name != "fake.rs"
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let product = text.split("#[cfg(test)]").next().unwrap();
            let relative = p.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
            (relative, blank_strings_and_comments(product))
        })
        .collect()
}

/// What makes a client, opens a connection or starts a thread.
const OPENS: [&str; 7] = [
    "kube::Client",
    "maas::Client",
    "Client::new",
    "ureq",
    "TcpStream",
    "TcpListener",
    "thread::",
];

#[test]
fn reconcilers_hold_no_client() {
    let mut found = Vec::new();
    let sources = product_sources("controllers");
    assert!(
        sources.len() >= 25,
        "the scan found {} files",
        sources.len()
    );
    for (path, text) in sources {
        for what in OPENS {
            if let Some(at) = text.find(what) {
                found.push(format!("{path}:{} {what}", line_of(&text, at)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "reconciler modules receive what they read through the ports: {found:#?}"
    );
}

/// A client named in code is seen; one named in a comment or a string is not.
#[test]
fn the_scan_sees_a_client_in_code() {
    let text = blank_strings_and_comments(
        "// a kube::Client would do\n\
         let name = \"thread::spawn\";\n\
         let c = maas::Client::new(config)?;\n",
    );
    let seen: Vec<&str> = OPENS.into_iter().filter(|w| text.contains(w)).collect();
    assert_eq!(seen, ["maas::Client", "Client::new"]);
}

#[test]
fn only_the_outside_systems_the_wiring_and_the_commands_open_connections() {
    let allowed = |path: &str| {
        ["kube/", "maas/", "serve/", "operator/", "runtime/", "cli/"]
            .iter()
            .any(|room| path.starts_with(room))
    };
    let mut found = Vec::new();
    let mut seen = 0;
    for (path, text) in product_sources("") {
        for what in OPENS {
            if let Some(at) = text.find(what) {
                seen += 1;
                if !allowed(&path) {
                    found.push(format!("{path}:{} {what}", line_of(&text, at)));
                }
            }
        }
    }
    assert!(
        seen >= 10,
        "the scan found only {seen} files opening anything"
    );
    assert!(found.is_empty(), "{found:#?}");
}

/// The error type of each `Result<..>` in `text`: its last top-level
/// argument, with the byte offset of the `Result`.
fn result_errors(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("Result<") {
        let start = from + at;
        from = start + "Result<".len();
        let whole_word = !text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !whole_word {
            continue;
        }
        let (mut depth, mut last_comma) = (1, from);
        for (i, c) in text[from..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        if last_comma > from {
                            let error = &text[last_comma..from + i];
                            out.push((start, error.split_whitespace().collect()));
                        }
                        break;
                    }
                }
                ',' if depth == 1 => last_comma = from + i + 1,
                _ => {}
            }
        }
    }
    out
}

#[test]
fn only_the_commands_return_text_errors() {
    let mut found = Vec::new();
    let mut in_cli = 0;
    for (path, text) in product_sources("") {
        for (at, error) in result_errors(&text) {
            if error != "String" {
                continue;
            }
            if path.starts_with("cli/") {
                in_cli += 1;
            } else {
                found.push(format!("{path}:{}", line_of(&text, at)));
            }
        }
    }
    assert!(in_cli >= 5, "the scan found {in_cli} in cli/");
    assert!(
        found.is_empty(),
        "each room has its own error type; text is for cli/: {found:#?}"
    );
}

#[test]
fn the_scan_reads_a_results_error_type() {
    let errors: Vec<String> = result_errors(
        "fn a() -> Result<(), String> {}\n\
         fn b() -> Result<Vec<(u8, u8)>, kube::Error> {}\n\
         fn c() -> io::Result<u8> {}\n\
         fn d() -> MyResult<u8, String> {}\n",
    )
    .into_iter()
    .map(|(_, e)| e)
    .collect();
    assert_eq!(errors, ["String", "kube::Error"]);
}
