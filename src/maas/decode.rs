//! Bounds on what a MAAS answer decodes to (issue 19 item 3).
//!
//! The body cap (`body_limit` in the client) bounds the bytes read, not
//! what they become: `{}` is two bytes and a [`Machine`](super::Machine)
//! several hundred, so a 2 MiB list of empty objects decoded to about
//! 466 MiB. While a body is decoded ([`with_budget`]), every element of a
//! list in the machine types ([`Charged`]: the machines, and each one's
//! interfaces, links, addresses, tags, owner data) costs its in-memory
//! size from a budget of bytes; a list that would exceed it fails to
//! decode, as a `Decode` error of that one call (the MAAS watch then
//! fails that one source's list, and keeps its last view). Strings cost
//! what they cost in the body, which the body cap already bounds. Values
//! the types only glance at ([`Loose`]: a zone's name, a number that may
//! be a string) are read without building any nested container.
//!
//! The budget is per thread (a decode runs on one thread, inside serde's
//! derived code that cannot carry it), set and restored by
//! [`with_budget`]; decoding outside it (tests, small single objects) is
//! uncharged.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::Machine;

/// The message a decode over its budget fails with (inside serde_json's
/// error, which adds the position).
pub(crate) const OVER_BUDGET: &str = "the answer decodes to more memory than allowed";

/// The message a list over its item cap fails with.
const TOO_MANY: &str = "a list of more than";

/// Whether a decode failed on one of these bounds (not on a malformed
/// answer).
pub(crate) fn is_over_bound(e: &serde_json::Error) -> bool {
    let text = e.to_string();
    text.contains(OVER_BUDGET) || text.contains(TOO_MANY)
}

thread_local! {
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
    /// The machines of the last list, sorted by system_id ([`with_previous`]).
    static PREVIOUS: RefCell<Vec<Arc<Machine>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `decode` with `bytes` of budget for the lists it decodes; the
/// previous budget (none, normally) is restored after, also on a panic.
pub(crate) fn with_budget<T>(bytes: usize, decode: impl FnOnce() -> T) -> T {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUDGET.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BUDGET.with(|b| b.replace(Some(bytes))));
    decode()
}

/// Takes `bytes` from the budget, if one is set.
fn charge<E: de::Error>(bytes: usize) -> Result<(), E> {
    BUDGET.with(|b| match b.get() {
        None => Ok(()),
        Some(left) if left >= bytes => {
            b.set(Some(left - bytes));
            Ok(())
        }
        Some(_) => Err(E::custom(OVER_BUDGET)),
    })
}

/// A JSON list of at most `MAX` elements, each charged its size; `null`
/// is an empty list.
#[derive(Debug)]
pub(crate) struct Charged<T, const MAX: usize = { usize::MAX }>(pub Vec<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for Charged<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct List<T, const MAX: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for List<T, MAX> {
            type Value = Vec<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a list of at most {MAX} elements, or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Vec<T>, E> {
                Ok(Vec::new())
            }
            fn visit_none<E: de::Error>(self) -> Result<Vec<T>, E> {
                Ok(Vec::new())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
                d.deserialize_seq(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
                let mut items = Vec::new();
                loop {
                    charge::<A::Error>(size_of::<T>())?;
                    let Some(item) = seq.next_element()? else {
                        return Ok(items);
                    };
                    if items.len() == MAX {
                        return Err(de::Error::custom(format_args!("{TOO_MANY} {MAX} elements")));
                    }
                    items.push(item);
                }
            }
        }
        d.deserialize_option(List::<T, MAX>(PhantomData))
            .map(Charged)
    }
}

/// Runs `decode` with the machines of the last list (sorted by system_id)
/// for [`SharedMachine`] to reuse; the previous ones (none, normally) are
/// restored after, also on a panic.
pub(crate) fn with_previous<T>(previous: Vec<Arc<Machine>>, decode: impl FnOnce() -> T) -> T {
    struct Restore(Vec<Arc<Machine>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PREVIOUS.with(|p| *p.borrow_mut() = std::mem::take(&mut self.0));
        }
    }
    let _restore = Restore(PREVIOUS.with(|p| p.replace(previous)));
    decode()
}

/// A machine of a list decoded straight into an `Arc` (charged the
/// `Arc`'s allocation), or, when the last list ([`with_previous`]) had it
/// just so, that list's `Arc`. A list of them holds one pointer per
/// machine: decoding a `Vec<Machine>` and sharing its elements after would
/// keep the whole `Vec` beside the `Arc`s until the last was made. And the
/// MAAS watch's list sits beside the view it replaces: with the unchanged
/// machines shared, the two hold apart only what changed in between.
pub(crate) struct SharedMachine(pub Arc<Machine>);

impl<'de> Deserialize<'de> for SharedMachine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        charge::<D::Error>(size_of::<Machine>() + 2 * size_of::<usize>())?;
        let machine = Machine::deserialize(d)?;
        let unchanged = PREVIOUS.with(|previous| {
            let previous = previous.borrow();
            let at = previous
                .binary_search_by(|old| old.system_id.as_str().cmp(&machine.system_id))
                .ok()?;
            previous.get(at).filter(|old| ***old == machine).cloned()
        });
        Ok(SharedMachine(
            unchanged.unwrap_or_else(|| Arc::new(machine)),
        ))
    }
}

/// `deserialize_with` for a lenient, charged list field.
pub(crate) fn charged_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Charged::<T>::deserialize(d).map(|c| c.0)
}

/// A JSON value as the lenient fields read it: a scalar, or an object's
/// `name` and `system_id` strings; nested lists and objects are skipped
/// without being built.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Loose {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    Object {
        name: Option<String>,
        system_id: Option<String>,
    },
    /// A list (skipped).
    List,
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Loose;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Loose, E> {
                Ok(Loose::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Loose, E> {
                Ok(Loose::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Loose, D::Error> {
                Loose::deserialize(d)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Loose, E> {
                Ok(Loose::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Loose, E> {
                Ok(Loose::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Loose, E> {
                Ok(Loose::Uint(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Loose, E> {
                Ok(Loose::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Loose, E> {
                Ok(Loose::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Loose, E> {
                Ok(Loose::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::List)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
                let (mut name, mut system_id) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "name" => &mut name,
                        "system_id" => &mut system_id,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    if let Loose::Str(s) = map.next_value::<Loose>()? {
                        *slot = Some(s);
                    }
                }
                Ok(Loose::Object { name, system_id })
            }
        }
        d.deserialize_any(V)
    }
}

impl Loose {
    /// A number, or a string holding one.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Loose::Int(i) => Some(*i as f64),
            Loose::Uint(u) => Some(*u as f64),
            Loose::Float(f) => Some(*f),
            Loose::Str(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// An integer (a fraction cut), or a string holding one.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Loose::Int(i) => Some(*i),
            Loose::Uint(u) => Some(i64::try_from(*u).unwrap_or(i64::MAX)),
            Loose::Float(f) => Some(*f as i64),
            Loose::Str(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// A scalar as text (owner data values are strings; MAAS may send a
    /// number); None for null, lists and objects.
    pub(crate) fn into_text(self) -> Option<String> {
        match self {
            Loose::Str(s) => Some(s),
            Loose::Bool(b) => Some(b.to_string()),
            Loose::Int(i) => Some(i.to_string()),
            Loose::Uint(u) => Some(u.to_string()),
            Loose::Float(f) => Some(f.to_string()),
            Loose::Null | Loose::List | Loose::Object { .. } => None,
        }
    }
}

/// A JSON object of text values, each entry charged; null is empty.
pub(crate) fn charged_text_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of strings, or null")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            loop {
                // A B-tree entry is about the two strings and a share of a node.
                charge::<A::Error>(3 * size_of::<String>())?;
                let Some((key, value)) = map.next_entry::<String, Loose>()? else {
                    return Ok(out);
                };
                if let Some(text) = value.into_text() {
                    out.insert(key, text);
                }
            }
        }
    }
    d.deserialize_option(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_charged_and_capped() {
        let list = "[1,2,3]";
        let parsed: Charged<u64, 3> = serde_json::from_str(list).unwrap();
        assert_eq!(parsed.0, [1, 2, 3]);
        let err = serde_json::from_str::<Charged<u64, 2>>(list).unwrap_err();
        assert!(err.to_string().contains("more than 2 elements"), "{err}");
        // Three elements and the end cost 4 × 8 bytes.
        assert!(with_budget(32, || serde_json::from_str::<Charged<u64>>(list)).is_ok());
        let err = with_budget(31, || serde_json::from_str::<Charged<u64>>(list)).unwrap_err();
        assert!(err.to_string().contains(OVER_BUDGET), "{err}");
        // Restored after: uncharged again.
        assert!(serde_json::from_str::<Charged<u64>>(list).is_ok());
        assert!(serde_json::from_str::<Charged<u64>>("null")
            .unwrap()
            .0
            .is_empty());
    }

    #[test]
    fn a_listed_machine_as_it_was_is_the_previous_arc() {
        let list = r#"[{"system_id": "a", "hostname": "one"},
                       {"system_id": "b", "hostname": "two"},
                       {"system_id": "c", "hostname": "three"}]"#;
        let decode = || serde_json::from_str::<Charged<SharedMachine>>(list).map(|c| c.0);
        let first: Vec<Arc<Machine>> = decode().unwrap().into_iter().map(|m| m.0).collect();
        let mut b = Machine::clone(&first[1]);
        b.hostname = "renamed".into();
        // Sorted by system_id, as the watch passes them.
        let previous = vec![Arc::clone(&first[0]), Arc::new(b), Arc::clone(&first[2])];
        let second = with_previous(previous.clone(), decode).unwrap();
        assert!(Arc::ptr_eq(&second[0].0, &first[0]));
        assert!(Arc::ptr_eq(&second[2].0, &first[2]));
        assert!(!Arc::ptr_eq(&second[1].0, &previous[1]), "b differs");
        assert_eq!(second[1].0.hostname, "two");
        // A reused machine is charged as a new one: the bound holds either way.
        let one = size_of::<Machine>() + 2 * size_of::<usize>();
        let err = with_budget(3 * one, || with_previous(previous.clone(), decode))
            .map(|list| list.len())
            .unwrap_err();
        assert!(err.to_string().contains(OVER_BUDGET), "{err}");
        // Restored after: nothing to reuse.
        let third = decode().unwrap();
        assert!(!Arc::ptr_eq(&third[0].0, &first[0]));
    }

    #[test]
    fn loose_values_skip_what_they_do_not_read() {
        let v: Loose = serde_json::from_str(r#"{"id": 1, "name": "zone-a", "x": [[[]]]}"#).unwrap();
        assert_eq!(
            v,
            Loose::Object {
                name: Some("zone-a".into()),
                system_id: None
            }
        );
        let v: Loose = serde_json::from_str("[[], [[]], {}]").unwrap();
        assert_eq!(v, Loose::List);
        assert_eq!(
            serde_json::from_str::<Loose>("\"4.5\"").unwrap().as_f64(),
            Some(4.5)
        );
        assert_eq!(
            serde_json::from_str::<Loose>("7").unwrap().as_i64(),
            Some(7)
        );
    }
}
