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

fn to_value<S: Serialize>(s: &S) -> Result<Value, Error> {
    // Cannot fail for our status types (string keys only); if it ever did,
    // writing nothing is the safe answer, never a null status.
    serde_json::to_value(s).map_err(|e| Error::Retry(format!("cannot serialize status: {e}")))
}
