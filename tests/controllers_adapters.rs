//! The Kubernetes adapter of the controllers against the real API server:
//! the guarded writes the crash-safety rules rely on (a merge patch carrying
//! a stale resourceVersion is refused with Conflict, on the object and on its
//! status subresource), per-name Secret reads, and the event path.

mod support;

use std::sync::Arc;
use std::time::Duration;

use capmaas::controllers::caches::Caches;
use capmaas::controllers::ports::{Kind, KubeApi};
use capmaas::kube::{self, resources, Resource};
use capmaas::operator::adapters::Kube;
use capmaas::runtime::{EventRecorder, Informer, InformerConfig, Object, Shutdown, Store};
use serde_json::{json, Value};

fn setup() -> (&'static support::ControlPlane, String, Kube, Shutdown) {
    let cp = support::control_plane();
    let ns = cp.new_namespace("adapters");
    let client = kube::Client::new(kube::Config::infer(Some(&cp.kubeconfig)).unwrap()).unwrap();
    let shutdown = Shutdown::new();
    let caches = Caches::new();
    fn spawn<T: Object>(
        client: &kube::Client,
        ns: &str,
        r: Resource,
        store: &Store<T>,
        s: &Shutdown,
    ) {
        let config = InformerConfig::new(r).namespace(Some(ns.to_string()));
        Informer::spawn(client.clone(), config, store.clone(), |_| {}, s.clone()).unwrap();
    }
    spawn(
        &client,
        &ns,
        resources::CLUSTERS,
        &caches.clusters,
        &shutdown,
    );
    spawn(
        &client,
        &ns,
        resources::MACHINES,
        &caches.machines,
        &shutdown,
    );
    spawn(
        &client,
        &ns,
        resources::MAAS_CLUSTERS,
        &caches.maas_clusters,
        &shutdown,
    );
    spawn(
        &client,
        &ns,
        resources::MAAS_MACHINES,
        &caches.maas_machines,
        &shutdown,
    );
    let within = Duration::from_secs(30);
    for synced in [
        caches.clusters.wait_until_synced(within),
        caches.machines.wait_until_synced(within),
        caches.maas_clusters.wait_until_synced(within),
        caches.maas_machines.wait_until_synced(within),
    ] {
        assert!(synced);
    }
    let events = EventRecorder::spawn(client.clone(), "capmaas-test", "test").unwrap();
    (
        cp,
        ns.clone(),
        Kube {
            client,
            caches,
            events,
        },
        shutdown,
    )
}

fn create_maas_cluster(cp: &support::ControlPlane, ns: &str, name: &str) -> Value {
    let obj = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"dnsDomain": "maas"},
    });
    serde_json::from_str(&cp.kubectl_stdin(&["create", "-o", "json", "-f", "-"], &obj.to_string()))
        .unwrap()
}

#[test]
fn stale_resource_versions_are_refused_on_object_and_status() {
    let (cp, ns, kube, shutdown) = setup();
    let created = create_maas_cluster(cp, &ns, "mc1");
    let rv0 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let with_finalizer = json!({"metadata": {"finalizers": ["maascluster.infrastructure.cluster.x-k8s.io"], "resourceVersion": rv0}});
    let rv1 = kube
        .patch(Kind::MaasCluster, &ns, "mc1", &with_finalizer)
        .unwrap();
    assert_ne!(rv1, rv0);

    // The same guarded write again, from a stale read: refused.
    let err = kube
        .patch(Kind::MaasCluster, &ns, "mc1", &with_finalizer)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    // The DNS name write on the status subresource is guarded the same way.
    let name = |rv: &str, dns: &str| json!({"metadata": {"resourceVersion": rv}, "status": {"ready": false, "network": {"dnsName": dns}}});
    let rv2 = kube
        .patch_status(
            Kind::MaasCluster,
            &ns,
            "mc1",
            &name(&rv1, "mc1-aaaaaa.maas"),
        )
        .unwrap();
    let err = kube
        .patch_status(
            Kind::MaasCluster,
            &ns,
            "mc1",
            &name(&rv1, "mc1-bbbbbb.maas"),
        )
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let stored: Value =
        serde_json::from_str(&cp.kubectl(&["get", "maascluster", "mc1", "-n", &ns, "-o", "json"]))
            .unwrap();
    assert_eq!(stored["status"]["network"]["dnsName"], "mc1-aaaaaa.maas");
    assert_eq!(stored["metadata"]["resourceVersion"], json!(rv2));

    // A status patch never touches the spec, and the cache catches up.
    support::eventually(30, "the cache sees the status", || {
        let mc = kube.maas_cluster(&ns, "mc1")?;
        (mc.dns_name() == Some("mc1-aaaaaa.maas")).then_some(())
    });
    assert_eq!(
        kube.maas_cluster(&ns, "mc1").unwrap().spec.dns_domain,
        "maas"
    );
    shutdown.trigger();
}

#[test]
fn secrets_are_read_by_name_and_key() {
    let (cp, ns, kube, shutdown) = setup();
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "boot",
        "-n",
        &ns,
        "--from-literal=value=#cloud-config",
    ]);
    assert_eq!(
        kube.secret_value(&ns, "boot", "value").unwrap().as_deref(),
        Some(&b"#cloud-config"[..])
    );
    assert_eq!(kube.secret_value(&ns, "boot", "format").unwrap(), None);
    assert_eq!(kube.secret_value(&ns, "missing", "value").unwrap(), None);
    shutdown.trigger();
}

#[test]
fn maas_machines_of_a_cluster_come_from_the_cache_by_label() {
    let (cp, ns, kube, shutdown) = setup();
    for (name, cluster) in [("a", "c1"), ("b", "c1"), ("c", "c2")] {
        let obj = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
            "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 1024},
        });
        cp.kubectl_stdin(&["create", "-f", "-"], &obj.to_string());
    }
    let kube = Arc::new(kube);
    let names = support::eventually(30, "three machines cached", || {
        let mut names: Vec<String> = kube
            .maas_machines_of_cluster(&ns, "c1")
            .into_iter()
            .map(|m| m.metadata.name.clone())
            .collect();
        names.sort();
        (names.len() == 2).then_some(names)
    });
    assert_eq!(names, ["a", "b"]);
    shutdown.trigger();
}
