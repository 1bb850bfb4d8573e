//! capmaas: a Cluster API infrastructure provider for Canonical MAAS.
//!
//! The layers, each knowing only the ones below it:
//!
//! - [`controllers`]: the story. MaasCluster and MaasMachine reconcilers and
//!   the workload API readiness poller. The only layer that joins MAAS and
//!   Kubernetes.
//! - [`api`]: the CRD types (serde) and the few Cluster API fields we read.
//! - [`runtime`]: generic controller machinery: watch threads and caches, the
//!   work queue, worker pools, Lease leader election, events.
//! - [`kube`]: raw Kubernetes REST over ureq: config, requests, typed errors,
//!   the watch stream.
//! - [`maas`]: the blocking MAAS client; knows nothing of Kubernetes.
//!
//! Beside them: [`serve`] (health probes and Prometheus metrics), [`metrics`]
//! (the process-wide registry every layer records into) and [`sim`] (the MAAS
//! simulator behind the `maas-sim` binary, used by tests and the local lab).

pub mod api;
pub mod backoff;
pub mod controllers;
pub mod kube;
pub mod maas;
pub mod metrics;
pub mod runtime;
pub mod serve;
pub mod sim;
