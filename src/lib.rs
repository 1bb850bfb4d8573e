//! capmaas: a Cluster API infrastructure provider for Canonical MAAS.
//!
//! The rooms, each knowing only the ones below it:
//!
//! - [`cli`]: the only code that starts from a person: flags, usage,
//!   logging, the `adopt` and `doctor` commands; its errors are messages.
//! - [`operator`]: the wiring: starts and stops the threads, queues,
//!   informers, workers, the api poller and the MAAS watch, and binds the
//!   reconcilers' ports to the clients (`adapters`, `credentials`).
//! - [`controllers`]: the story. The reconcilers, holding no client: they
//!   read and write through ports. With the wiring, the only layers that
//!   join MAAS and Kubernetes.
//! - [`api`]: the CRD types (serde) and the few Cluster API fields we read;
//!   the one shape of a watched object, from the informer to the reconcile.
//! - [`runtime`]: generic controller machinery: typed stores and the
//!   informers that fill them, the work queue, worker pools, Lease leader
//!   election, events.
//! - [`kube`]: raw Kubernetes REST over ureq: config, requests, typed errors,
//!   the watch stream.
//! - [`maas`]: the blocking MAAS client; knows nothing of Kubernetes.
//!
//! Beside them: [`serve`] (health probes and Prometheus metrics),
//! [`metrics`] (the process-wide registry every layer records into) and
//! [`backoff`] (the one jittered exponential backoff, used by the runtime
//! and the MAAS client) and [`clock`] (time arithmetic that cannot
//! overflow). The MAAS simulator the tests run against is not
//! part of the product: it is its own package, `tests/maas-sim`.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod api;
pub mod backoff;
pub mod cli;
pub mod clock;
pub mod controllers;
pub mod kube;
pub mod maas;
pub mod metrics;
pub mod operator;
pub mod runtime;
pub mod serve;
pub mod sync;
