//! Writing status: compute the whole desired status, then send only the
//! difference from what was read. A reconcile that observed nothing new
//! sends nothing.

use serde::Serialize;
use serde_json::{json, Value};

use super::ports::{Kind, KubeApi};
use super::Error;
use crate::api::patch::merge_diff;
use crate::api::ObjectMeta;

/// Patches `status` from `old` to `new`; returns whether a write was made.
/// Keeps `meta.resourceVersion` current for later guarded writes.
pub(crate) fn write<S: Serialize>(
    kube: &dyn KubeApi,
    kind: Kind,
    meta: &mut ObjectMeta,
    old: Option<&S>,
    new: &S,
) -> Result<bool, Error> {
    let old = match old {
        Some(old) => to_value(old)?,
        None => Value::Null,
    };
    let new = to_value(new)?;
    let Some(diff) = merge_diff(&old, &new) else {
        return Ok(false);
    };
    meta.resource_version = kube.patch_status(
        kind,
        &meta.namespace,
        &meta.name,
        &json!({ "status": diff }),
    )?;
    Ok(true)
}

/// The outcome of a reconcile whose status write came last: the story's own
/// error wins (the write error is only logged), then a failed write.
pub(crate) fn settle<T>(
    key: &str,
    result: Result<T, Error>,
    written: Result<(), Error>,
) -> Result<T, Error> {
    match (result, written) {
        (Err(e), Err(write_err)) => {
            log::warn!("{key}: status write failed after an error: {write_err}");
            Err(e)
        }
        (Err(e), Ok(())) => Err(e),
        (Ok(_), Err(write_err)) => Err(write_err),
        (Ok(next), Ok(())) => Ok(next),
    }
}

fn to_value<S: Serialize>(s: &S) -> Result<Value, Error> {
    // Cannot fail for our status types (string keys only); if it ever did,
    // writing nothing is the safe answer, never a null status.
    serde_json::to_value(s).map_err(|e| Error::Retry(format!("cannot serialize status: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(what: &str) -> Error {
        Error::Retry(what.to_string())
    }

    #[test]
    fn the_story_error_wins_then_the_write_error() {
        let both = settle::<()>("ns/a", Err(err("story")), Err(err("write")));
        assert_eq!(both.unwrap_err().to_string(), "will retry: story");
        let write_only = settle("ns/a", Ok(1), Err(err("write")));
        assert_eq!(write_only.unwrap_err().to_string(), "will retry: write");
        assert_eq!(settle("ns/a", Ok(1), Ok(())).unwrap(), 1);
    }
}
