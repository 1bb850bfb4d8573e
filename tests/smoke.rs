//! Proves the test tier itself: a real kube-apiserver of the pinned version,
//! the Cluster API CRDs Established, and raw REST from Rust (ureq + rustls)
//! authenticated with the admin kubeconfig's client certificate.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

const PINNED_KUBERNETES: &str = "v1.34.4";

fn admin_agent() -> ureq::Agent {
    let cp = support::control_plane();
    let read = |p: &std::path::Path| std::fs::read(p).unwrap();
    let ca = Certificate::from_pem(&read(&cp.ca_file)).unwrap();
    let cert = Certificate::from_pem(&read(&cp.admin_cert)).unwrap();
    let key = PrivateKey::from_pem(&read(&cp.admin_key)).unwrap();
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[ca]))
        .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

fn get(agent: &ureq::Agent, path: &str) -> (u16, Value) {
    let url = format!("{}{path}", support::control_plane().server);
    let mut resp = agent.get(&url).call().unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_json().unwrap())
}

#[test]
fn server_reports_the_pinned_version() {
    let (status, version) = get(&admin_agent(), "/version");
    assert_eq!(status, 200);
    assert_eq!(version["gitVersion"], PINNED_KUBERNETES, "{version}");
}

#[test]
fn cluster_api_crds_are_established() {
    let agent = admin_agent();
    for crd in [
        "clusters.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
        "machinesets.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    ] {
        let (status, obj) = get(
            &agent,
            &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"),
        );
        assert_eq!(status, 200, "{crd}: {obj}");
        let established = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{crd} is not Established: {}", obj["status"]);
        let served: Vec<&str> = obj["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["served"] == true)
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert!(served.contains(&"v1beta2"), "{crd} serves {served:?}");
    }
}

#[test]
fn a_cluster_is_created_and_read_back_over_raw_rest() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("smoke");
    let agent = admin_agent();
    let base = format!(
        "{}/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/clusters",
        cp.server
    );
    let cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "prod-cluster", "labels": {"story": "smoke"}},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}}
    });
    let mut created = agent.post(&base).send_json(&cluster).unwrap();
    assert_eq!(
        created.status().as_u16(),
        201,
        "{}",
        created.body_mut().read_to_string().unwrap()
    );

    let (status, read) = get(
        &agent,
        &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/clusters/prod-cluster"),
    );
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["metadata"]["labels"]["story"], "smoke");
    assert_eq!(
        read["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "192.168.0.0/16"
    );
    assert!(read["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));

    // Creating it again is a 409 AlreadyExists with a Status body, not a
    // transport error: the API server's answers reach us intact.
    let mut again = agent.post(&base).send_json(&cluster).unwrap();
    assert_eq!(again.status().as_u16(), 409);
    let body: Value = again.body_mut().read_json().unwrap();
    assert_eq!(body["reason"], "AlreadyExists", "{body}");
}

#[test]
fn anonymous_requests_are_not_admin() {
    // Without the client certificate RBAC denies listing: the admin rights in
    // the other tests come from the certificate, not from an open server.
    let cp = support::control_plane();
    let ca = Certificate::from_pem(&std::fs::read(&cp.ca_file).unwrap())
        .unwrap()
        .to_owned();
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[ca]))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let resp = agent
        .get(&format!("{}/api/v1/namespaces", cp.server))
        .call()
        .unwrap();
    assert!(
        matches!(resp.status().as_u16(), 401 | 403),
        "got {}",
        resp.status()
    );
}
