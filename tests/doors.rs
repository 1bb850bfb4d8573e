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
//!
//! The door to Kubernetes (issue 21 items 2 and 3): `kube::Client`'s
//! writes (read from `kube/client.rs`) are called only in the files of
//! `KUBE_WRITERS`, each listed for its reason; never in `controllers/`,
//! whose writes go through `KubeApi` and `WorkloadApi`.

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
/// items left out. (`cli/doctor` releases orphans
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
            (p, product_code(&text))
        })
        .collect()
}

/// A file's product code: strings and comments blanked, then each
/// `#[cfg(test)]` item (a `mod tests;` line, a braced module) blanked too,
/// lines kept. (Cutting the file at its first `#[cfg(test)]` would drop
/// all the code after a `mod tests;` declared near the top.)
fn product_code(text: &str) -> String {
    const TEST_ITEM: &str = "#[cfg(test)]";
    let code = blank_strings_and_comments(text);
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(at) = rest.find(TEST_ITEM) {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = item_len(item);
        out.extend(item[..end].chars().map(|c| if c == '\n' { c } else { ' ' }));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The length of the item `text` starts with (attributes included):
/// through its first `;` outside brackets, or the `}` closing its body.
fn item_len(text: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    text.len()
}

/// Strings and comments replaced by spaces (lengths and lines kept).
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
                // Line breaks kept, so that lines are counted right.
                let blank = |c: Option<char>| if c == Some('\n') { '\n' } else { ' ' };
                while let Some(c) = chars.next() {
                    out.push(blank(Some(c)));
                    match c {
                        '\\' => out.push(blank(chars.next())),
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
/// `src/`: test files and `#[cfg(test)]` items left out, strings and
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
            let relative = p.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
            (relative, product_code(&text))
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

/// `kube::Client`'s methods that send a write (POST, PUT, PATCH, DELETE),
/// with the number of arguments each takes; checked against
/// `src/kube/client.rs` by `the_list_of_kube_writes_is_the_clients`.
const KUBE_WRITES: [(&str, usize); 12] = [
    // A SelfSubjectReview: the API server keeps nothing.
    ("check_credentials", 0),
    ("create", 3),
    ("create_subresource", 5),
    ("replace", 4),
    ("replace_status", 4),
    ("patch_merge", 4),
    ("patch_json", 4),
    ("patch_status_merge", 4),
    ("apply_status", 5),
    ("delete", 4),
    ("add_finalizer", 3),
    ("remove_finalizer", 3),
];

/// The only files whose product code calls those, each for its own reason
/// (issue 21 item 2). Never `controllers/`: the reconcilers write through
/// their ports, `KubeApi` and `WorkloadApi`, bound in `operator/adapters.rs`.
const KUBE_WRITERS: [&str; 7] = [
    // The client itself (its finalizer patches, feature `test-api`).
    "kube/client.rs",
    // The reconcilers' ports bound to the client.
    "operator/adapters.rs",
    // The operator's credentials checked at start (`check_credentials`).
    "operator/mod.rs",
    // MaasMachineTemplate capacity: the wiring's own refresher, no reconciler.
    "operator/template_capacity.rs",
    // Events: POST, then PATCH of the count.
    "runtime/events.rs",
    // The leader Lease.
    "runtime/leader.rs",
    // `capmaas adopt`, for a person: the MaasMachine's annotations.
    "cli/adopt/mod.rs",
];

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// How many arguments the call whose `(` starts `call` passes (a trailing
/// comma allowed; closures' `|a, b|` and turbofish commas are not told
/// apart, and no write's arguments have them).
fn arguments(call: &str) -> usize {
    let (mut depth, mut done, mut current) = (0, 0, false);
    for c in call.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            break;
        }
        match c {
            ',' if depth == 1 => {
                done += 1;
                current = false;
            }
            '(' if depth == 1 => {}
            c if !c.is_whitespace() => current = true,
            _ => {}
        }
    }
    done + usize::from(current)
}

/// The calls of a `kube::Client` write in `text`, by byte offset: `.name(`
/// with the method's number of arguments, or `::name(` with one more (the
/// client). The count tells them from `str::replace`, `HashMap::replace`,
/// a `ureq` `delete(url)` or a reconciler's own `delete(owner)`.
fn kube_writes(text: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (name, arity) in KUBE_WRITES {
        let mut from = 0;
        while let Some(at) = text[from..].find(name) {
            let start = from + at;
            let end = start + name.len();
            from = end;
            let before = text[..start].trim_end();
            let after = text[end..].trim_start();
            if text[end..].starts_with(is_ident) || !after.starts_with('(') {
                continue;
            }
            let given = arguments(after);
            if (before.ends_with('.') && given == arity)
                || (before.ends_with("::") && given == arity + 1)
            {
                found.push((start, name));
            }
        }
    }
    found.sort();
    found
}

/// The public methods of `kube::Client` that send a write, read from
/// `src/kube/client.rs`: those whose body names a writing HTTP method or
/// calls a method that does; with the number of arguments each takes.
fn client_writes() -> Vec<(String, usize)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kube/client.rs");
    let text = product_code(&std::fs::read_to_string(path).unwrap());
    let starts: Vec<usize> = text
        .match_indices("fn ")
        .map(|(at, _)| at)
        .filter(|&at| !text[..at].ends_with(is_ident))
        .collect();
    // (name, public, arguments, its text up to the next fn)
    let mut fns = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let item = &text[start..starts.get(i + 1).copied().unwrap_or(text.len())];
        let name: String = item[3..].chars().take_while(|c| is_ident(*c)).collect();
        let public = text[..start].trim_end().ends_with("pub");
        let params = &item[item.find('(').unwrap()..];
        let takes_self = params[1..]
            .trim_start()
            .trim_start_matches('&')
            .starts_with("self");
        fns.push((
            name,
            public,
            arguments(params) - usize::from(takes_self),
            item,
        ));
    }
    let mut writing: Vec<String> = fns
        .iter()
        .filter(|f| {
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|m| f.3.contains(&format!("Method::{m}")))
        })
        .map(|f| f.0.clone())
        .collect();
    loop {
        let callers: Vec<String> = fns
            .iter()
            .filter(|f| !writing.contains(&f.0))
            .filter(|f| writing.iter().any(|w| !calls(f.3, w).is_empty()))
            .map(|f| f.0.clone())
            .collect();
        if callers.is_empty() {
            break;
        }
        writing.extend(callers);
    }
    let mut public: Vec<(String, usize)> = fns
        .into_iter()
        .filter(|f| f.1 && writing.contains(&f.0))
        .map(|f| (f.0, f.2))
        .collect();
    public.sort();
    public
}

#[test]
fn the_list_of_kube_writes_is_the_clients() {
    let mut listed: Vec<(String, usize)> = KUBE_WRITES
        .iter()
        .map(|(name, arity)| (name.to_string(), *arity))
        .collect();
    listed.sort();
    assert_eq!(client_writes(), listed);
}

#[test]
fn kubernetes_writes_are_sent_only_by_the_modules_that_own_them() {
    assert!(KUBE_WRITERS.iter().all(|f| !f.starts_with("controllers/")));
    let mut outside = Vec::new();
    let mut writers = std::collections::BTreeSet::new();
    for (path, text) in product_sources("") {
        for (at, name) in kube_writes(&text) {
            if KUBE_WRITERS.contains(&path.as_str()) {
                writers.insert(path.clone());
            } else {
                outside.push(format!("{path}:{} .{name}(", line_of(&text, at)));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "Kubernetes writes outside the modules that own them \
         (a reconciler writes through KubeApi or WorkloadApi): {outside:#?}"
    );
    let idle: Vec<&&str> = KUBE_WRITERS
        .iter()
        .filter(|f| !writers.contains(**f))
        .collect();
    assert!(
        idle.is_empty(),
        "listed as writing to Kubernetes but writing nothing (take them off): {idle:?}"
    );
}

/// A write is seen across lines, through the type and with a trailing
/// comma; a `replace` or `delete` of something else, a comment, a string
/// and a `#[cfg(test)]` module are not, and code after a `mod tests;` is.
/// Lines are counted right after a string broken over two.
#[test]
fn the_scan_sees_a_kube_write() {
    let text = product_code(
        "pub fn patch_merge(&self, r: &Resource, ns: Option<&str>, name: &str, p: &Value) {}\n\
         let v = self.client\n    .patch_status_merge(resource(kind), Some(ns), name, &patch)?;\n\
         let s = text.replace(\"a\\\nb\", \"b\");\n\
         agent.delete(&url).call()?;\n\
         // client.create(&EVENTS, ns, &event)\n\
         let t = \"client.create(&EVENTS, ns, &event)\";\n\
         #[cfg(test)]\n\
         mod tests;\n\
         kube::Client::delete(&kube, &NODES, None, name, None)?;\n\
         kube.create(&EVENTS, Some(ns), &json!({\"a\": [1, 2]}),)?;\n\
         #[cfg(test)]\n\
         mod tests { fn t() { client.create(&R, None, &o); } }\n",
    );
    let seen: Vec<(usize, &str)> = kube_writes(&text)
        .into_iter()
        .map(|(at, name)| (line_of(&text, at), name))
        .collect();
    assert_eq!(
        seen,
        [(3, "patch_status_merge"), (11, "delete"), (12, "create")]
    );
}
