//! One reconcile of one of our objects (a MaasCluster or a MaasMachine):
//! the scaffold both reconcilers share.
//!
//! ```text
//! Reconciling::new(ctx, object)      the object as cached; the status to build starts as read
//!   paused?(cluster) → ensure_finalizer() → the kind's story: set(condition), event(..),
//!   patch(..) (guarded writes of spec/metadata), status fields
//! finish(result)                      Ready summarised from the kind's conditions,
//!                                     then ONE status write: the diff from what was read
//! finish_deletion()                   final status, finalizer removed, nothing more written
//! ```
//!
//! The whole status is computed in memory and written once, as a merge
//! patch of the difference from what was read (`kube::merge_patch::diff`):
//! a reconcile that observed nothing new writes nothing. Finalizer and
//! status patches carry the resourceVersion read, so a stale cache cannot
//! overwrite someone else's finalizer list or our own last status (the API
//! server answers Conflict and the key is retried). Events are logged, sent
//! to the API server (aggregated by the recorder) and counted on `/metrics`.

use serde::Serialize;
use serde_json::{json, Value};

use std::sync::Arc;

use super::maas_view::MaasView;
use super::ports::CredentialsError;
use super::ports::{EventTarget, EventType, Kind};
use super::{Context, Error};
use crate::api::capi::{self, Cluster};
use crate::api::conditions::{self, Condition, Desired};
use crate::api::{IdentityRef, ObjectMeta};
use crate::kube::{self, merge_patch};
use crate::runtime::Action;

/// One of our kinds, as the scaffold needs it.
pub(crate) trait OwnKind: Clone {
    type Status: Serialize + Default + Clone;
    /// What a reconcile of this kind learns on the way and needs later.
    type Facts: Default;
    const KIND: Kind;
    const FINALIZER: &'static str;
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    fn status(&self) -> Option<&Self::Status>;
    fn conditions(status: &Self::Status) -> &[Condition];
    fn conditions_mut(status: &mut Self::Status) -> &mut Vec<Condition>;
    /// The conditions `Ready` summarises.
    fn ready_of(facts: &Self::Facts) -> Vec<&'static str>;
}

/// One reconcile in progress: the object as read, the status being built.
pub(crate) struct Reconciling<'c, K: OwnKind> {
    pub ctx: &'c Context,
    /// The object as read, kept current by our own writes (resourceVersion,
    /// finalizers, patched fields).
    pub object: K,
    /// The status as last read or written: the base of the final diff.
    old_status: Option<K::Status>,
    pub status: K::Status,
    /// This reconcile's time, RFC 3339, for condition transitions.
    pub now: String,
    /// Recompute `Ready` at the end (not while paused or deleting).
    pub summarize: bool,
    /// The object may be gone (finalizer removed): write nothing more.
    done_with_object: bool,
    /// The MAAS of the object's cluster, once [`Reconciling::connect_maas`]
    /// found its credentials.
    maas: Option<Arc<MaasView>>,
    pub facts: K::Facts,
}

impl<'c, K: OwnKind> Reconciling<'c, K> {
    pub fn new(ctx: &'c Context, object: K) -> Reconciling<'c, K> {
        let old_status = object.status().cloned();
        Reconciling {
            ctx,
            status: old_status.clone().unwrap_or_default(),
            old_status,
            object,
            now: kube::time::time_of_unix_seconds(ctx.clock.now()),
            summarize: true,
            done_with_object: false,
            maas: None,
            facts: K::Facts::default(),
        }
    }

    /// `MaasMachine ns/name`, for log lines and messages.
    pub fn key(&self) -> String {
        let meta = self.object.meta();
        format!("{} {}/{}", K::KIND.as_str(), meta.namespace, meta.name)
    }

    /// Sets a condition of the status being built (at the generation read).
    pub fn set(&mut self, desired: Desired<'_>) {
        let generation = self.object.meta().generation;
        let conditions = K::conditions_mut(&mut self.status);
        conditions::set(conditions, desired, generation, &self.now);
    }

    /// Sets a condition False: `reason`, and `message` saying why.
    pub fn set_false(&mut self, type_: &str, reason: &str, message: impl Into<String>) {
        self.set(Desired::false_(type_, reason, message));
    }

    /// Sets a condition True, for `reason`.
    pub fn set_true(&mut self, type_: &str, reason: &str) {
        self.set(Desired::true_(type_, reason));
    }

    /// A condition of the status being built, if it is set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        conditions::get(K::conditions(&self.status), type_)
    }

    /// The reason a condition has now, if it is set.
    pub fn condition_reason(&self, type_: &str) -> Option<&str> {
        self.condition(type_).map(|c| c.reason.as_ref())
    }

    /// Seconds since the condition last changed status (0 if unknown).
    pub fn condition_age(&self, type_: &str) -> u64 {
        let now = self.ctx.clock.now();
        self.condition(type_)
            .and_then(|c| kube::time::unix_seconds(&c.last_transition_time))
            .map(|since| now.saturating_sub(since))
            .unwrap_or(0)
    }

    /// Finds the MAAS of the object's cluster: its own credentials
    /// (`identity`, the MaasCluster's `spec.identityRef`) or the
    /// controller's. Every MAAS call of the reconcile goes there.
    pub fn connect_maas(&mut self, identity: Option<&IdentityRef>) -> Result<(), CredentialsError> {
        let namespace = &self.object.meta().namespace;
        self.maas = Some(self.ctx.maas.for_cluster(namespace, identity)?);
        Ok(())
    }

    /// The MAAS found by [`Reconciling::connect_maas`]; asking before is a
    /// bug in the story, reported as an error rather than a panic.
    pub fn maas(&self) -> Result<&MaasView, Error> {
        self.maas.as_deref().ok_or_else(|| {
            Error::Retry(format!(
                "{}: MAAS asked before its credentials were found",
                self.key()
            ))
        })
    }

    /// [`event`](Self::event) of type Normal.
    pub fn normal_event(&self, reason: &str, message: &str) {
        self.event(EventType::Normal, reason, message);
    }

    /// [`event`](Self::event) of type Warning.
    pub fn warning_event(&self, reason: &str, message: &str) {
        self.event(EventType::Warning, reason, message);
    }

    /// Records an Event on the object: logged, sent to the API server
    /// (de-duplicated there by the recorder) and counted on `/metrics`.
    pub fn event(&self, type_: EventType, reason: &str, message: &str) {
        let meta = self.object.meta();
        let target = EventTarget {
            kind: K::KIND,
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
        };
        let key = self.key();
        match type_ {
            EventType::Normal => log::info!("{key}: {reason}: {message}"),
            EventType::Warning => log::warn!("{key}: {reason}: {message}"),
        }
        self.ctx.kube.event(&target, type_, reason, message);
        super::count_action(K::KIND, reason);
    }

    /// Paused if the Cluster says so or the object carries the annotation:
    /// then `Paused` is True with the reason, `Ready` is left alone, and
    /// true is returned. Otherwise `Paused` is False.
    pub fn paused(&mut self, cluster: Option<&Cluster>) -> bool {
        let by_cluster = cluster.is_some_and(Cluster::is_paused);
        let by_annotation = self.object.meta().has_annotation(capi::PAUSED_ANNOTATION);
        let kind = K::KIND.as_str();
        let annotation = capi::PAUSED_ANNOTATION;
        let why = match (by_cluster, by_annotation) {
            (false, false) => {
                self.set_false(conditions::PAUSED, conditions::NOT_PAUSED_REASON, "");
                return false;
            }
            (true, false) => "Cluster spec.paused is set to true".to_string(),
            (false, true) => format!("{kind} has the {annotation} annotation"),
            (true, true) => format!(
                "Cluster spec.paused is set to true, {kind} has the {annotation} annotation"
            ),
        };
        self.set(Desired::true_(conditions::PAUSED, conditions::PAUSED_REASON).with_message(why));
        self.summarize = false;
        true
    }

    /// A JSON merge patch of the object (metadata, spec); a patch carrying
    /// `metadata.resourceVersion` fails with Conflict if the object changed
    /// since it was read. Keeps the resourceVersion current for later
    /// guarded writes.
    pub fn patch(&mut self, patch: &Value) -> Result<(), Error> {
        let meta = self.object.meta();
        let version = self
            .ctx
            .kube
            .patch(K::KIND, &meta.namespace, &meta.name, patch)?;
        self.object.meta_mut().resource_version = version;
        Ok(())
    }

    /// A guarded JSON merge patch of the status subresource, for a value
    /// that must be stored before anything else happens (the DNS name);
    /// `written` applies the same change to the status being built and to
    /// the base of the final diff, so it is not sent again.
    pub fn patch_status_now(
        &mut self,
        patch: &Value,
        written: impl Fn(&mut K::Status),
    ) -> Result<(), Error> {
        let meta = self.object.meta();
        let version = self
            .ctx
            .kube
            .patch_status(K::KIND, &meta.namespace, &meta.name, patch)?;
        self.object.meta_mut().resource_version = version;
        written(&mut self.status);
        written(self.old_status.get_or_insert_with(Default::default));
        Ok(())
    }

    /// Adds our finalizer if missing (a guarded write).
    pub fn ensure_finalizer(&mut self) -> Result<(), Error> {
        if self.object.meta().has_finalizer(K::FINALIZER) {
            return Ok(());
        }
        let mut finalizers = self.object.meta().finalizers.clone();
        finalizers.push(K::FINALIZER.to_string());
        self.write_finalizers(finalizers)
    }

    /// Whether our finalizer is on the object: without it, a deleting
    /// object is none of our business any more.
    pub fn has_finalizer(&self) -> bool {
        self.object.meta().has_finalizer(K::FINALIZER)
    }

    /// The end of a deletion: the final status is written, then our
    /// finalizer removed (a guarded write); the API server may delete the
    /// object at once, so nothing more is written.
    pub fn finish_deletion(&mut self) -> Result<Action, Error> {
        self.summarize = false;
        self.write_status()?;
        self.let_go()
    }

    /// Leaves the object to others: our finalizer (if any) removed, nothing
    /// else written, not even the status (an externally managed object's
    /// status is its owner's).
    pub fn let_go(&mut self) -> Result<Action, Error> {
        self.done_with_object = true;
        if self.has_finalizer() {
            let finalizers = self
                .object
                .meta()
                .finalizers
                .iter()
                .filter(|f| *f != K::FINALIZER)
                .cloned()
                .collect();
            self.write_finalizers(finalizers)?;
        }
        Ok(Action::Done)
    }

    /// Ends this reconcile's writes: `finish` writes no status.
    pub fn write_nothing_more(&mut self) {
        self.done_with_object = true;
    }

    /// Sets `Ready` (unless paused or done with the object) and writes the
    /// status diff, whatever the story returned. The story's own error
    /// wins over a failed status write (which is then only logged).
    pub fn finish(mut self, result: Result<Action, Error>) -> Result<Action, Error> {
        if self.done_with_object {
            return result;
        }
        if self.summarize {
            let of = K::ready_of(&self.facts);
            let generation = self.object.meta().generation;
            let conditions = K::conditions_mut(&mut self.status);
            conditions::set_ready_summary(conditions, &of, generation, &self.now);
        }
        let written = self.write_status();
        settle(&self.key(), result, written)
    }

    /// Patches the status from what was read (or last written) to what it
    /// should be; writes nothing when they are equal.
    pub fn write_status(&mut self) -> Result<(), Error> {
        let old = match &self.old_status {
            Some(old) => to_value(old)?,
            None => Value::Null,
        };
        let Some(diff) = merge_patch::diff(&old, &to_value(&self.status)?) else {
            return Ok(());
        };
        // Guarded by the resourceVersion read: a merge patch replaces the
        // whole conditions list, so a reconcile that started from a stale
        // cache (our own last write not seen yet) would drop a condition
        // set once; the API server answers Conflict and the key is retried
        // on the fresh object instead.
        let meta = self.object.meta();
        let version = self.ctx.kube.patch_status(
            K::KIND,
            &meta.namespace,
            &meta.name,
            &json!({ "metadata": {"resourceVersion": meta.resource_version}, "status": diff }),
        )?;
        self.object.meta_mut().resource_version = version;
        self.old_status = Some(self.status.clone());
        Ok(())
    }

    fn write_finalizers(&mut self, finalizers: Vec<String>) -> Result<(), Error> {
        let version = &self.object.meta().resource_version;
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": version}});
        self.patch(&patch)?;
        self.object.meta_mut().finalizers = finalizers;
        Ok(())
    }
}

/// The outcome of a reconcile whose status write came last: the story's own
/// error wins (the write error is only logged), then a failed write.
fn settle<T>(key: &str, result: Result<T, Error>, written: Result<(), Error>) -> Result<T, Error> {
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
