//! Adding and removing our finalizer. Both patches carry the
//! resourceVersion we read, so a stale cache cannot overwrite someone else's
//! finalizer list: the API server answers Conflict and the key is retried.

use serde_json::json;

use super::ports::{Kind, KubeApi};
use super::Error;
use crate::api::ObjectMeta;

/// Adds `finalizer` if missing; returns whether a write was made.
pub(crate) fn ensure(
    kube: &dyn KubeApi,
    kind: Kind,
    meta: &mut ObjectMeta,
    finalizer: &str,
) -> Result<bool, Error> {
    if meta.has_finalizer(finalizer) {
        return Ok(false);
    }
    let mut finalizers = meta.finalizers.clone();
    finalizers.push(finalizer.to_string());
    meta.resource_version = write(kube, kind, meta, &finalizers)?;
    meta.finalizers = finalizers;
    Ok(true)
}

/// Removes `finalizer` if present; returns whether a write was made.
pub(crate) fn remove(
    kube: &dyn KubeApi,
    kind: Kind,
    meta: &mut ObjectMeta,
    finalizer: &str,
) -> Result<bool, Error> {
    if !meta.has_finalizer(finalizer) {
        return Ok(false);
    }
    let finalizers: Vec<String> = meta
        .finalizers
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    meta.resource_version = write(kube, kind, meta, &finalizers)?;
    meta.finalizers = finalizers;
    Ok(true)
}

fn write(
    kube: &dyn KubeApi,
    kind: Kind,
    meta: &ObjectMeta,
    finalizers: &[String],
) -> Result<String, Error> {
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}});
    Ok(kube.patch(kind, &meta.namespace, &meta.name, &patch)?)
}
