//! Kubeconfig YAML to a `serde_json::Value` tree, which config.rs then types
//! with serde_json.
//!
//! The tree is built straight from the YAML parser's events (granit-parser):
//! a serde YAML deserializer linked for this one document cost ~190 KB of
//! the static binary (BENCHMARKS.md "Binary size").
//!
//! Scalars resolve by the YAML 1.2 core schema: a plain `null`, `~` or empty
//! scalar is null, `true`/`false` (also `True`, `TRUE`, ...) a boolean,
//! `12`, `-3`, `0x1f`, `0o17`, `1.5`, `2e3` numbers, anything else a string;
//! quoted and block (`|`, `>`) scalars are always strings. Core-schema tags
//! (`!!str`, `!!int`, `!!float`, `!!bool`, `!!null`, `!!map`, `!!seq`) are
//! honoured, other tags refused. A mapping key is the text of its scalar
//! (`1: a` has key `"1"`). Anchors, aliases and `<<` merge keys resolve.
//!
//! The input may be a user's Secret, so it is hostile: every size below is
//! bounded (a "billion laughs" document of nested aliases stops at the node
//! budget), the tree is built without recursion, and an error names a line,
//! a column and what is wrong, never any text of the document (a kubeconfig
//! holds keys and tokens).

use std::borrow::Cow;
use std::fmt;

use granit_parser::{Event, Marker, Parser, ScalarStyle, Tag};
use serde_json::{Map, Number, Value};

// A kubeconfig is a few KiB with no anchors; these leave room for large
// ones (hundreds of clusters) and refuse what only an attack needs.
const MAX_EVENTS: usize = 100_000;
const MAX_NODES: usize = 20_000;
const MAX_SCALAR_BYTES: usize = 4 * 1024 * 1024;
const MAX_DEPTH: usize = 32;
const MAX_ANCHORS: usize = 64;
const MAX_ALIASES: usize = 64;
const MAX_MERGE_KEYS: usize = 64;
/// Anchored nodes are kept (copied) for their aliases: at most this much.
const MAX_ANCHORED_NODES: usize = 10_000;
const MAX_ANCHORED_BYTES: usize = 1024 * 1024;

/// Why the YAML was refused, and where (1-based line and column).
#[derive(Debug)]
pub(crate) struct YamlError {
    line: usize,
    column: usize,
    what: &'static str,
}

impl YamlError {
    fn at(marker: &Marker, what: &'static str) -> YamlError {
        YamlError {
            line: marker.line(),
            column: marker.col() + 1,
            what,
        }
    }
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at line {} column {}: {}",
            self.line, self.column, self.what
        )
    }
}

/// The one YAML document in `yaml` (UTF-8, or UTF-16 with a byte-order
/// mark) as a JSON value; an empty document is `null`.
pub(crate) fn to_json(yaml: &[u8]) -> Result<Value, YamlError> {
    let text = decode(yaml)?;
    let mut tree = TreeBuilder::default();
    for next in Parser::new_from_str(&text) {
        let (event, span) = next.map_err(|e| YamlError::at(e.marker(), "not well-formed YAML"))?;
        tree.event(event)
            .map_err(|what| YamlError::at(&span.start, what))?;
    }
    Ok(tree.root.unwrap_or(Value::Null))
}

fn decode(yaml: &[u8]) -> Result<Cow<'_, str>, YamlError> {
    let refused = |what| YamlError {
        line: 1,
        column: 1,
        what,
    };
    // UTF-16 is what Windows PowerShell 5 writes with `>`.
    let big_endian = match yaml {
        [0xfe, 0xff, ..] => true,
        [0xff, 0xfe, ..] => false,
        _ => {
            return std::str::from_utf8(yaml)
                .map(Cow::Borrowed)
                .map_err(|_| refused("not UTF-8 (nor UTF-16 with a byte-order mark)"));
        }
    };
    if yaml.len() % 2 != 0 {
        return Err(refused("UTF-16 of an odd number of bytes"));
    }
    let units = yaml.iter().step_by(2).zip(yaml.iter().skip(1).step_by(2));
    char::decode_utf16(units.map(|(&a, &b)| {
        if big_endian {
            u16::from_be_bytes([a, b])
        } else {
            u16::from_le_bytes([a, b])
        }
    }))
    .collect::<Result<String, _>>()
    .map(Cow::Owned)
    .map_err(|_| refused("not valid UTF-16"))
}

/// Builds the tree from parser events, counting against the budgets.
#[derive(Default)]
struct TreeBuilder {
    root: Option<Value>,
    /// The mappings and sequences open around the current event.
    open: Vec<Open>,
    /// Anchored nodes, complete, for the aliases that follow.
    anchored: Vec<Anchored>,
    documents: usize,
    events: usize,
    nodes: usize,
    scalar_bytes: usize,
    anchors: usize,
    aliases: usize,
    merge_keys: usize,
    anchored_nodes: usize,
    anchored_bytes: usize,
}

struct Open {
    collection: Collection,
    /// Its anchor's id, or 0.
    anchor: usize,
    /// `nodes` and `scalar_bytes` when it opened, to size it when it closes.
    nodes_before: usize,
    bytes_before: usize,
    /// The deepest level (1 = the root collection) reached inside it.
    deepest: usize,
}

enum Collection {
    Sequence(Vec<Value>),
    Mapping {
        map: Map<String, Value>,
        /// The key read, waiting for its value.
        key: Option<Key>,
        /// The mappings of `<<` merge keys, merged when the mapping closes.
        merged: Vec<Map<String, Value>>,
    },
}

enum Key {
    Name(String),
    Merge,
}

struct Anchored {
    id: usize,
    value: Value,
    /// What one more copy costs in the budgets.
    nodes: usize,
    bytes: usize,
    /// Nesting levels inside it (0 for a scalar).
    levels: usize,
}

impl TreeBuilder {
    fn event(&mut self, event: Event<'_>) -> Result<(), &'static str> {
        self.events += 1;
        if self.events > MAX_EVENTS {
            return Err("too many YAML events");
        }
        match event {
            Event::DocumentStart(..) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err("more than one YAML document");
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let bytes = text.len();
                self.count_node(bytes)?;
                let merge_key =
                    matches!(style, ScalarStyle::Plain) && tag.is_none() && text == "<<";
                let value = scalar(text, style, tag.as_deref())?;
                if anchor != 0 {
                    self.count_anchor()?;
                    self.record(anchor, &value, 1, bytes, 0)?;
                }
                self.add(value, merge_key)?;
            }
            Event::SequenceStart(_, anchor, tag) => {
                check_collection_tag(tag.as_deref(), "seq")?;
                self.start(Collection::Sequence(Vec::new()), anchor)?;
            }
            Event::MappingStart(_, anchor, tag) => {
                check_collection_tag(tag.as_deref(), "map")?;
                let mapping = Collection::Mapping {
                    map: Map::new(),
                    key: None,
                    merged: Vec::new(),
                };
                self.start(mapping, anchor)?;
            }
            Event::SequenceEnd | Event::MappingEnd => self.end()?,
            Event::Alias(id) => self.alias(id)?,
            // Stream and document boundaries; anchor names and comments
            // are not emitted with the parser's options used here.
            _ => {}
        }
        Ok(())
    }

    fn count_node(&mut self, scalar_bytes: usize) -> Result<(), &'static str> {
        self.nodes += 1;
        self.scalar_bytes += scalar_bytes;
        self.check_size()
    }

    fn check_size(&self) -> Result<(), &'static str> {
        if self.nodes > MAX_NODES {
            return Err("too many YAML nodes (aliases count each copy)");
        }
        if self.scalar_bytes > MAX_SCALAR_BYTES {
            return Err("too much text (aliases count each copy)");
        }
        Ok(())
    }

    fn count_anchor(&mut self) -> Result<(), &'static str> {
        self.anchors += 1;
        if self.anchors > MAX_ANCHORS {
            return Err("too many anchors");
        }
        Ok(())
    }

    fn start(&mut self, collection: Collection, anchor: usize) -> Result<(), &'static str> {
        self.count_node(0)?;
        if anchor != 0 {
            self.count_anchor()?;
        }
        let depth = self.open.len() + 1;
        if depth > MAX_DEPTH {
            return Err("mappings and sequences nested too deeply");
        }
        self.open.push(Open {
            collection,
            anchor,
            nodes_before: self.nodes - 1,
            bytes_before: self.scalar_bytes,
            deepest: depth,
        });
        Ok(())
    }

    fn end(&mut self) -> Result<(), &'static str> {
        let Some(closed) = self.open.pop() else {
            return Err("a collection ends that never started");
        };
        // This collection sat at level `open.len() + 1`.
        let levels = closed.deepest - self.open.len();
        if let Some(parent) = self.open.last_mut() {
            parent.deepest = parent.deepest.max(closed.deepest);
        }
        let value = match closed.collection {
            Collection::Sequence(items) => Value::Array(items),
            Collection::Mapping {
                mut map, merged, ..
            } => {
                // Keys of the mapping itself win, then earlier merges.
                for entries in merged {
                    for (key, value) in entries {
                        map.entry(key).or_insert(value);
                    }
                }
                Value::Object(map)
            }
        };
        if closed.anchor != 0 {
            let nodes = self.nodes - closed.nodes_before;
            let bytes = self.scalar_bytes - closed.bytes_before;
            self.record(closed.anchor, &value, nodes, bytes, levels)?;
        }
        self.add(value, false)
    }

    fn record(
        &mut self,
        id: usize,
        value: &Value,
        nodes: usize,
        bytes: usize,
        levels: usize,
    ) -> Result<(), &'static str> {
        self.anchored_nodes += nodes;
        self.anchored_bytes += bytes;
        if self.anchored_nodes > MAX_ANCHORED_NODES || self.anchored_bytes > MAX_ANCHORED_BYTES {
            return Err("anchored nodes too large");
        }
        self.anchored.push(Anchored {
            id,
            value: value.clone(),
            nodes,
            bytes,
            levels,
        });
        Ok(())
    }

    fn alias(&mut self, id: usize) -> Result<(), &'static str> {
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err("too many aliases");
        }
        let Some(target) = self.anchored.iter().find(|a| a.id == id) else {
            // `&a [*a]`: the parser knows the anchor, but its node is open.
            return Err("an alias inside the node it refers to");
        };
        let (value, nodes, bytes, levels) = (
            target.value.clone(),
            target.nodes,
            target.bytes,
            target.levels,
        );
        self.nodes += nodes;
        self.scalar_bytes += bytes;
        self.check_size()?;
        let reach = self.open.len() + levels;
        if reach > MAX_DEPTH {
            return Err("mappings and sequences nested too deeply");
        }
        if let Some(parent) = self.open.last_mut() {
            parent.deepest = parent.deepest.max(reach);
        }
        self.add(value, false)
    }

    /// Puts a complete node where it belongs: the root, the next item of a
    /// sequence, or a mapping's next key or value.
    fn add(&mut self, value: Value, merge_key: bool) -> Result<(), &'static str> {
        let Some(parent) = self.open.last_mut() else {
            self.root = Some(value);
            return Ok(());
        };
        match &mut parent.collection {
            Collection::Sequence(items) => items.push(value),
            Collection::Mapping { map, key, merged } => match key.take() {
                None if merge_key => *key = Some(Key::Merge),
                None => *key = Some(Key::Name(key_text(value)?)),
                Some(Key::Name(name)) => {
                    if map.contains_key(&name) {
                        return Err("a mapping has the same key twice");
                    }
                    map.insert(name, value);
                }
                Some(Key::Merge) => {
                    self.merge_keys += 1;
                    if self.merge_keys > MAX_MERGE_KEYS {
                        return Err("too many merge keys (<<)");
                    }
                    const NOT_MAPPINGS: &str = "a merge key (<<) with a value other than mappings";
                    match value {
                        Value::Object(entries) => merged.push(entries),
                        Value::Array(items) => {
                            for item in items {
                                let Value::Object(entries) = item else {
                                    return Err(NOT_MAPPINGS);
                                };
                                merged.push(entries);
                            }
                        }
                        _ => return Err(NOT_MAPPINGS),
                    }
                }
            },
        }
        Ok(())
    }
}

/// A mapping key as JSON needs it: a string.
fn key_text(key: Value) -> Result<String, &'static str> {
    match key {
        Value::String(text) => Ok(text),
        Value::Null => Ok("null".to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Array(_) | Value::Object(_) => Err("a mapping key that is a mapping or sequence"),
    }
}

fn check_collection_tag(tag: Option<&Tag>, core: &str) -> Result<(), &'static str> {
    match tag {
        Some(tag) if tag.core_suffix() != Some(core) => Err("an unsupported YAML tag"),
        _ => Ok(()),
    }
}

fn scalar(
    text: Cow<'_, str>,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<Value, &'static str> {
    let Some(tag) = tag else {
        return match style {
            ScalarStyle::Plain => plain(text),
            _ => Ok(Value::String(text.into_owned())),
        };
    };
    const MISFIT: &str = "a tagged scalar that does not fit its tag";
    match tag.core_suffix() {
        Some("str") => Ok(Value::String(text.into_owned())),
        Some("null") if is_null(&text) => Ok(Value::Null),
        Some("bool") => boolean(&text).map(Value::Bool).ok_or(MISFIT),
        // One number reader for both: kubeconfigs have no numbers to read.
        Some("int" | "float") => match number(&text) {
            Some(n) => n.map(Value::Number),
            None => Err(MISFIT),
        },
        Some("null") => Err(MISFIT),
        _ => Err("an unsupported YAML tag"),
    }
}

/// A plain (unquoted, untagged) scalar by the YAML 1.2 core schema.
fn plain(text: Cow<'_, str>) -> Result<Value, &'static str> {
    if is_null(&text) {
        return Ok(Value::Null);
    }
    if let Some(b) = boolean(&text) {
        return Ok(Value::Bool(b));
    }
    match number(&text) {
        Some(n) => n.map(Value::Number),
        None => Ok(Value::String(text.into_owned())),
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// `None` when `text` is not a core-schema number; an error when it is one
/// that JSON cannot hold (`.inf`, `.nan`, `1e999`, `0xffffffffffffffffff`).
fn number(text: &str) -> Option<Result<Number, &'static str>> {
    const OUT_OF_RANGE: &str = "a number JSON cannot hold (infinite, NaN or too large)";
    let radix = |digits: &str, radix: u32| {
        let valid = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
        valid.then(|| {
            u64::from_str_radix(digits, radix)
                .map(Number::from)
                .map_err(|_| OUT_OF_RANGE)
        })
    };
    if let Some(hex) = text.strip_prefix("0x") {
        return radix(hex, 16);
    }
    if let Some(octal) = text.strip_prefix("0o") {
        return radix(octal, 8);
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if is_digits(unsigned) {
        if let Ok(n) = text.parse::<i64>() {
            return Some(Ok(n.into()));
        }
        if let Ok(n) = text.parse::<u64>() {
            return Some(Ok(n.into()));
        }
        // Larger integers are read as floats, as JSON readers do.
    }
    if is_float(unsigned) {
        let finite = text.parse::<f64>().ok().and_then(Number::from_f64);
        return Some(finite.ok_or(OUT_OF_RANGE));
    }
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return Some(Err(OUT_OF_RANGE));
    }
    None
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, the core schema's
/// float without its sign (integers match too).
fn is_float(text: &str) -> bool {
    let (mantissa, exponent_ok) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (
            mantissa,
            is_digits(exponent.strip_prefix(['-', '+']).unwrap_or(exponent)),
        ),
        None => (text, true),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            (is_digits(whole) || whole.is_empty())
                && (is_digits(fraction) || fraction.is_empty())
                && !(whole.is_empty() && fraction.is_empty())
        }
        None => is_digits(mantissa),
    };
    exponent_ok && mantissa_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(yaml: &str) -> Value {
        to_json(yaml.as_bytes()).unwrap()
    }

    fn refused(yaml: &str) -> String {
        to_json(yaml.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn block_and_flow_styles_give_the_same_tree() {
        let block = "clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
users: []
";
        let flow = "{clusters: [{name: c1, cluster: {server: 'https://10.0.0.1:6443', \
                    insecure-skip-tls-verify: true}}], users: []}";
        let expected = json!({
            "clusters": [{"name": "c1", "cluster": {
                "server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": true}}],
            "users": [],
        });
        assert_eq!(parse(block), expected);
        assert_eq!(parse(flow), expected);
    }

    #[test]
    fn plain_scalars_resolve_by_the_core_schema() {
        let yaml = "
nulls: [null, Null, NULL, ~]
empty:
bools: [true, True, TRUE, false, False, FALSE]
yaml11: [yes, no, on, off, y, n]
ints: [0, -12, +7, 0x1f, 0o17, 018, 9223372036854775807, 18446744073709551615]
floats: [1.5, -.5, 2., 1e3, 6.02E+23]
strings: [1.2.3, 0x, 0o8, 1e, .5.5, 1_000, 10.0.0.1, +.nan, v1]
";
        let expected = json!({
            "nulls": [null, null, null, null],
            "empty": null,
            "bools": [true, true, true, false, false, false],
            "yaml11": ["yes", "no", "on", "off", "y", "n"],
            "ints": [0, -12, 7, 31, 15, 18, 9223372036854775807i64, 18446744073709551615u64],
            "floats": [1.5, -0.5, 2.0, 1000.0, 6.02e23],
            "strings": ["1.2.3", "0x", "0o8", "1e", ".5.5", "1_000", "10.0.0.1", "+.nan", "v1"],
        });
        assert_eq!(parse(yaml), expected);
        // Larger than any integer JSON holds: read as a float.
        assert_eq!(
            parse("123456789012345678901234"),
            json!(1.2345678901234568e23)
        );
    }

    #[test]
    fn quoted_block_and_str_tagged_scalars_are_strings() {
        let yaml = "
a: 'true'
b: \"12\"
c: 'null'
d: ''
e: !!str 0x1f
f: |
  line one
  line two
g: >-
  folded
  text
h: \"tab\\there\"
i: 'it''s'
";
        let expected = json!({
            "a": "true", "b": "12", "c": "null", "d": "", "e": "0x1f",
            "f": "line one\nline two\n", "g": "folded text", "h": "tab\there", "i": "it's",
        });
        assert_eq!(parse(yaml), expected);
    }

    #[test]
    fn core_tags_are_honoured_and_others_refused() {
        let yaml = "{a: !!int '42', b: !!bool 'true', c: !!null '', d: !!float 1, e: !!map {}, f: !!seq []}";
        assert_eq!(
            parse(yaml),
            json!({"a": 42, "b": true, "c": null, "d": 1, "e": {}, "f": []})
        );
        assert!(refused("a: !!int abc").contains("does not fit its tag"));
        assert!(refused("a: !!binary AAAA").contains("unsupported YAML tag"));
        assert!(refused("a: !custom x").contains("unsupported YAML tag"));
        assert!(refused("a: !!seq {}").contains("unsupported YAML tag"));
    }

    #[test]
    fn keys_are_the_text_of_their_scalars() {
        assert_eq!(
            parse("{1: a, true: b, ~: c, 'x y': d}"),
            json!({"1": "a", "true": "b", "null": "c", "x y": "d"})
        );
        assert!(refused("? [a]\n: b\n").contains("key that is a mapping or sequence"));
        assert!(refused("a: 1\nb: 2\na: 3\n").contains("same key twice"));
    }

    #[test]
    fn anchors_aliases_and_merge_keys_resolve() {
        let yaml = "
base: &base {server: 'https://h:1', insecure-skip-tls-verify: true}
name: &n c1
clusters:
- {name: *n, cluster: *base}
- name: c2
  cluster:
    <<: *base
    server: https://h:2
- cluster: {<<: [{a: 1}, {a: 2, b: 2}], c: 3}
";
        let tree = parse(yaml);
        assert_eq!(tree["clusters"][0]["name"], "c1");
        assert_eq!(tree["clusters"][0]["cluster"], tree["base"]);
        assert_eq!(
            tree["clusters"][1]["cluster"],
            json!({"server": "https://h:2", "insecure-skip-tls-verify": true})
        );
        assert_eq!(
            tree["clusters"][2]["cluster"],
            json!({"a": 1, "b": 2, "c": 3})
        );
        assert!(refused("a: {<<: x}").contains("merge key"));
        assert!(refused("a: &a [1, *a]").contains("alias inside the node"));
    }

    #[test]
    fn budgets_refuse_hostile_documents() {
        // Nine copies of nine copies of ...: stops at the node budget.
        let mut laughs = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
        for i in 1..9u8 {
            let (prev, cur) = ((b'a' + i - 1) as char, (b'a' + i) as char);
            laughs.push_str(&format!("{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        assert!(refused(&laughs).contains("too many YAML nodes"), "{laughs}");

        let aliases = format!("a: &a x\nb: [{}]\n", vec!["*a"; 65].join(", "));
        assert!(refused(&aliases).contains("too many aliases"));
        let anchors: String = (0..65).map(|i| format!("k{i}: &a{i} v\n")).collect();
        assert!(refused(&anchors).contains("too many anchors"));

        assert!(refused(&format!("a: {}{}", "[".repeat(33), "]".repeat(33))).contains("nested"));
        assert!(to_json(format!("a: {}{}", "[".repeat(31), "]".repeat(31)).as_bytes()).is_ok());
        // An alias to a deep node, placed deep, goes over the depth too.
        let deep = format!(
            "a: &a {}{}\nb: {}*a{}\n",
            "[".repeat(20),
            "]".repeat(20),
            "[".repeat(20),
            "]".repeat(20)
        );
        assert!(refused(&deep).contains("nested"));

        let big = format!("a: [{}]\n", vec!["x"; MAX_NODES].join(","));
        assert!(refused(&big).contains("too many YAML nodes"));
        let long = format!("a: {}\nb: {}\n", "x".repeat(3 << 20), "y".repeat(2 << 20));
        assert!(refused(&long).contains("too much text"));
        assert!(refused("a: 1\n---\nb: 2\n").contains("more than one YAML document"));
        assert!(refused("a: .inf").contains("JSON cannot hold"));
        assert!(refused("a: 1e999").contains("JSON cannot hold"));
    }

    #[test]
    fn errors_say_where_and_never_quote_the_document() {
        let secret = "s3cret-t0ken";
        for yaml in [
            format!("token: {secret}\n  bad: [\n"),
            format!("token: \"{secret}"),
            format!("a: !{secret} x"),
            format!("{secret}: 1\n{secret}: 2\n"),
        ] {
            let err = refused(&yaml);
            assert!(err.starts_with("at line "), "{err}");
            assert!(!err.contains(secret), "{err}");
        }
        assert_eq!(
            refused("a: 1\nb: !!int x\n"),
            "at line 2 column 10: a tagged scalar that does not fit its tag"
        );
    }

    #[test]
    fn empty_input_is_null_and_encodings_are_checked() {
        assert_eq!(parse(""), Value::Null);
        assert_eq!(parse("# only a comment\n"), Value::Null);
        assert_eq!(parse("\u{feff}a: 1"), json!({"a": 1}));
        let utf16le: Vec<u8> = "\u{feff}a: b\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert_eq!(to_json(&utf16le).unwrap(), json!({"a": "b"}));
        let utf16be: Vec<u8> = "\u{feff}a: b\n"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        assert_eq!(to_json(&utf16be).unwrap(), json!({"a": "b"}));
        assert!(to_json(b"a: \xff\xfe")
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        assert!(to_json(b"\xff\xfea")
            .unwrap_err()
            .to_string()
            .contains("odd number"));
    }
}
