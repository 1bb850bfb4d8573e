//! JSON merge patches (RFC 7386) computed from what was read and what should
//! be: the controllers write only the difference, and nothing at all when
//! nothing changed.

use serde_json::{Map, Value};

/// The merge patch that turns `old` into `new`, or `None` if they are equal.
/// Objects are diffed key by key (a removed key becomes `null`); anything else
/// (arrays included) is replaced whole.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
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
                        if let Some(p) = merge_diff(old_value, new_value) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_need_no_patch() {
        assert_eq!(
            merge_diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})),
            None
        );
    }

    #[test]
    fn removed_keys_become_null_and_arrays_are_replaced() {
        let old =
            json!({"ready": true, "failureReason": "x", "nested": {"a": 1, "b": 2}, "list": [1]});
        let new = json!({"ready": true, "nested": {"a": 1, "b": 3}, "list": [1, 2], "added": "y"});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"failureReason": null, "nested": {"b": 3}, "list": [1, 2], "added": "y"}))
        );
    }
}
