//! JSON merge patches (RFC 7386) computed from what was read and what should
//! be: the controllers write only the difference, and nothing at all when
//! nothing changed.

use serde_json::{Map, Value};

/// The merge patch that turns `old` into `new`, or `None` if they are equal.
/// Objects are diffed key by key (a removed key becomes `null`); anything else
/// (arrays included) is replaced whole.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, old_value) in old {
                match new.get(key) {
                    None => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) => {
                        if let Some(p) = diff(old_value, new_value) {
                            patch.insert(key.clone(), p);
                        }
                    }
                }
            }
            for (key, new_value) in new {
                if !old.contains_key(key) {
                    patch.insert(key.clone(), new_value.clone());
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ => Some(new.clone()),
    }
}

/// Applies a merge patch to `target` as the API server would: objects are
/// merged key by key (`null` removes), anything else replaces. Never
/// panics, whatever `target` holds (a field that is not an object becomes
/// one), unlike assigning through `value["a"]["b"]`.
pub fn apply(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(object) = target {
        for (key, value) in fields {
            if value.is_null() {
                object.remove(key);
            } else {
                apply(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn apply_merges_and_replaces_what_is_not_an_object() {
        let mut lease = json!({"spec": "not an object", "metadata": {"name": "l", "x": 1}});
        apply(
            &mut lease,
            &json!({"spec": {"renewTime": "t"}, "metadata": {"x": null}}),
        );
        assert_eq!(
            lease,
            json!({"spec": {"renewTime": "t"}, "metadata": {"name": "l"}})
        );
        let old = json!({"a": {"b": 1, "c": [1]}, "d": 2});
        let new = json!({"a": {"c": [2]}, "e": "x"});
        let mut patched = old.clone();
        apply(&mut patched, &diff(&old, &new).unwrap());
        assert_eq!(patched, new, "apply(diff(old, new)) == new");
    }

    #[test]
    fn equal_values_need_no_patch() {
        assert_eq!(diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})), None);
    }

    #[test]
    fn removed_keys_become_null_and_arrays_are_replaced() {
        let old =
            json!({"ready": true, "failureReason": "x", "nested": {"a": 1, "b": 2}, "list": [1]});
        let new = json!({"ready": true, "nested": {"a": 1, "b": 3}, "list": [1, 2], "added": "y"});
        assert_eq!(
            diff(&old, &new),
            Some(json!({"failureReason": null, "nested": {"b": 3}, "list": [1, 2], "added": "y"}))
        );
    }
}
