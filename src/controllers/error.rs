//! The one error type of the controllers layer: the clients' own errors,
//! passed through unchanged, and the reconcilers' own reasons to retry. A
//! reconcile that returns it is retried by the work queue with per-key
//! exponential backoff.

use std::fmt;

use super::ports::CredentialsError;
use crate::{kube, maas};

#[derive(Debug)]
pub enum Error {
    Maas(maas::Error),
    /// The management cluster's API server.
    Kube(kube::Error),
    /// The workload cluster could not be reached or refused a write.
    Workload(kube::Error),
    /// The MAAS credentials of the object's cluster cannot be used (the
    /// reason is on a condition).
    Credentials(CredentialsError),
    /// Waiting on something that is not an error in itself, but should be
    /// retried with backoff (e.g. MAAS has no matching machine); the message
    /// is already on a condition.
    Retry(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Maas(e) => e.fmt(f),
            Error::Kube(e) => write!(f, "kubernetes: {e}"),
            Error::Workload(e) => write!(f, "workload cluster: {e}"),
            Error::Credentials(e) => write!(f, "MAAS credentials: {e}"),
            Error::Retry(e) => write!(f, "will retry: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// MAAS could not be reached or was busy: nothing was learned, so no
    /// condition should change because of it.
    pub fn is_maas_unavailable(&self) -> bool {
        matches!(self, Error::Maas(e) if e.is_transient())
    }

    /// The Kubernetes object we wrote to no longer exists.
    pub fn is_kube_not_found(&self) -> bool {
        matches!(self, Error::Kube(e) if e.is_not_found())
    }
}

impl From<maas::Error> for Error {
    fn from(e: maas::Error) -> Error {
        Error::Maas(e)
    }
}

impl From<CredentialsError> for Error {
    fn from(e: CredentialsError) -> Error {
        Error::Credentials(e)
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Error {
        Error::Kube(e)
    }
}
