//! The manager running with exactly the RBAC of deploy/rbac.yaml: it
//! authenticates as the `capmaas-manager` ServiceAccount with a TokenRequest
//! token (as a pod would), against the real API server, and must sync its
//! caches, win the Lease, take a MaasCluster and one control-plane MaasMachine
//! through their lives (finalizers, spec and status patches, bootstrap Secret,
//! events, MAAS allocate/deploy/release, deletion) and shut down releasing the
//! Lease, without one 401 or 403.

mod support;

use support::service_account::{deploy_file, reconcile_as_service_account};

#[test]
fn manager_reconciles_as_its_service_account_without_a_403() {
    let cp = support::control_plane();
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("namespace.yaml"));
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("rbac.yaml"));
    let ns = cp.new_namespace("sa-story");
    reconcile_as_service_account(cp, &ns, &[]);
}
