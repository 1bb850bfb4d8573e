//! The `kube` client against a real kube-apiserver + etcd: authentication,
//! every verb, typed errors from real Status bodies, pagination, guarded
//! finalizer patches and the watch protocol (order, bookmarks, 410).

mod support;

use capmaas::kube::resources::{CLUSTERS, CONFIG_MAPS, NAMESPACES, SECRETS, SERVICE_ACCOUNTS};
use capmaas::kube::{
    meta, Client, Config, Error, ListParams, Propagation, WatchEvent, WatchParams,
};
use serde_json::{json, Value};

fn admin() -> Client {
    let cp = support::control_plane();
    Client::new(Config::infer(Some(&cp.kubeconfig)).unwrap()).unwrap()
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn cluster(name: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {"test": "kube-client"}},
        "spec": {"paused": true},
    })
}

/// A service account in `ns` and a short-lived token for it (TokenRequest).
fn service_account_token(client: &Client, ns: &str, name: &str) -> String {
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
    client.create(&SERVICE_ACCOUNTS, Some(ns), &sa).unwrap();
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    });
    let answer = client
        .create_subresource(&SERVICE_ACCOUNTS, Some(ns), name, "token", &request)
        .unwrap();
    answer["status"]["token"].as_str().unwrap().to_string()
}

#[test]
fn kubeconfig_client_certificate_authenticates() {
    let client = admin();
    assert_eq!(client.server(), support::control_plane().server);

    let (status, body) = client.get_raw("/readyz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, body) = client.get_raw("/version").unwrap();
    assert_eq!(status, 200);
    let version: Value = serde_json::from_str(&body).unwrap();
    assert!(version["gitVersion"].as_str().unwrap().starts_with('v'));

    // The admin user may read cluster-scoped objects.
    let default = client.get(&NAMESPACES, None, "default").unwrap();
    assert_eq!(meta::name(&default), Some("default"));
}

#[test]
fn kubeconfig_bytes_with_inline_data_authenticate() {
    // The shape of a workload cluster's `<cluster>-kubeconfig` Secret.
    use base64::Engine as _;
    let cp = support::control_plane();
    let b64 = |p: &std::path::Path| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap())
    };
    let yaml = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: workload
  cluster:
    server: {server}
    certificate-authority-data: {ca}
contexts:
- name: workload-admin@workload
  context: {{cluster: workload, user: workload-admin}}
current-context: workload-admin@workload
users:
- name: workload-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
        server = cp.server,
        ca = b64(&cp.ca_file),
        cert = b64(&cp.admin_cert),
        key = b64(&cp.admin_key),
    );
    let config = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap();
    let client = Client::new(config)
        .unwrap()
        .with_timeout(std::time::Duration::from_secs(5));
    assert_eq!(client.get_raw("/readyz").unwrap().0, 200);
    let namespaces = client
        .list(&NAMESPACES, None, &ListParams::default())
        .unwrap();
    assert!(namespaces
        .items
        .iter()
        .any(|n| meta::name(n) == Some("default")));

    // The same document pointing at files is refused without a base dir.
    let by_path = yaml.replace(
        &format!("certificate-authority-data: {}", b64(&cp.ca_file)),
        &format!("certificate-authority: {}", cp.ca_file.display()),
    );
    let err = Config::from_kubeconfig_yaml(by_path.as_bytes(), None, None).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[test]
fn a_refused_credential_is_unauthorized() {
    let cp = support::control_plane();
    let ca = std::fs::read(&cp.ca_file).unwrap();
    let config = Config::new(&cp.server, Some(&ca))
        .unwrap()
        .with_bearer_token("not-a-real-token");
    let err = Client::new(config)
        .unwrap()
        .get(&NAMESPACES, None, "default")
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err}");
    assert!(!err.to_string().contains("not-a-real-token"));
}

#[test]
fn an_unknown_server_certificate_is_a_tls_error() {
    let cp = support::control_plane();
    // Trust some other CA: the real server's certificate must be refused.
    let other_ca = include_bytes!("../src/kube/testdata/client.crt");
    let config = Config::new(&cp.server, Some(other_ca)).unwrap();
    let err = Client::new(config).unwrap().get_raw("/readyz").unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
}

/// `connect_to`: one API server behind a name, reached at an address the
/// name need not resolve to, its certificate verified for the name.
#[test]
fn connect_to_reaches_the_address_and_verifies_the_name() {
    let cp = support::control_plane();
    let port = cp.server.rsplit(':').next().unwrap();
    let ca = std::fs::read(&cp.ca_file).unwrap();
    let at_loopback = |name: &str| {
        let mut config = Config::new(&format!("https://{name}:{port}"), Some(&ca))
            .unwrap()
            .with_bearer_token("unused");
        config.connect_to = Some("127.0.0.1".parse().unwrap());
        Client::new(config).unwrap()
    };
    // `kubernetes` is in the server's certificate and resolves nowhere
    // here: an answer (even 401 for the token) means the address was used.
    let (status, _) = at_loopback("kubernetes").get_raw("/readyz").unwrap();
    assert!(status == 200 || status == 401, "{status}");
    // A name the certificate does not carry is refused at the handshake.
    let err = at_loopback("api.capmaas.invalid")
        .get_raw("/readyz")
        .unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
}

#[test]
fn rbac_denial_is_forbidden() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-forbidden");
    let token = service_account_token(&client, &ns, "nobody");
    let ca = std::fs::read(&cp.ca_file).unwrap();
    let nobody = Client::new(
        Config::new(&cp.server, Some(&ca))
            .unwrap()
            .with_bearer_token(token),
    )
    .unwrap();

    // Authenticated (discovery is open to every user) ...
    assert_eq!(nobody.get_raw("/version").unwrap().0, 200);
    // ... but without rights on secrets.
    let err = nobody
        .list(&SECRETS, Some(&ns), &ListParams::default())
        .unwrap_err();
    assert!(matches!(err, Error::Forbidden { .. }), "{err}");
    assert_eq!(err.status(), Some(403));
    let err = nobody
        .create(&CONFIG_MAPS, Some(&ns), &configmap("x", json!({})))
        .unwrap_err();
    assert!(matches!(err, Error::Forbidden { .. }), "{err}");
}

#[test]
fn token_file_is_re_read_after_a_401() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-tokenfile");
    let token = service_account_token(&client, &ns, "reader");
    let dir = support::tempdir("kube-tokenfile").unwrap();
    std::fs::copy(&cp.ca_file, dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("token"), "stale-token\n").unwrap();
    // Relative paths resolve against the kubeconfig's directory.
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
current-context: sa
clusters: [{{name: c, cluster: {{server: '{}', certificate-authority: ca.crt}}}}]
contexts: [{{name: sa, context: {{cluster: c, user: sa, namespace: {ns}}}}}]
users: [{{name: sa, user: {{tokenFile: token}}}}]
",
        cp.server
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let client = Client::new(Config::infer(Some(&path)).unwrap()).unwrap();
    assert_eq!(client.default_namespace(), Some(ns.as_str()));

    let err = client.get_raw("/version").map(|(s, _)| s);
    // Raw GETs report the status as it came.
    assert_eq!(err.unwrap(), 401);
    let err = client.get(&NAMESPACES, None, "default").unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err}");

    // kubelet rotated the token: the next request after the 401 reads it.
    std::fs::write(dir.join("token"), format!("{token}\n")).unwrap();
    let err = client.get(&SECRETS, Some(&ns), "none").unwrap_err();
    assert!(matches!(err, Error::Forbidden { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configmap_crud_and_typed_errors() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-crud");
    let ns = Some(ns.as_str());

    let created = client
        .create(&CONFIG_MAPS, ns, &configmap("cm", json!({"a": "1"})))
        .unwrap();
    assert_eq!(created["data"]["a"], "1");
    let err = client
        .create(&CONFIG_MAPS, ns, &configmap("cm", json!({})))
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    let got = client.get(&CONFIG_MAPS, ns, "cm").unwrap();
    assert_eq!(meta::uid(&got), meta::uid(&created));

    let mut changed = got.clone();
    changed["data"] = json!({"a": "2"});
    let replaced = client.replace(&CONFIG_MAPS, ns, "cm", &changed).unwrap();
    assert_eq!(replaced["data"]["a"], "2");

    // `changed` still carries the old resourceVersion.
    changed["data"] = json!({"a": "3"});
    let err = client
        .replace(&CONFIG_MAPS, ns, "cm", &changed)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(
        client.get(&CONFIG_MAPS, ns, "cm").unwrap()["data"]["a"],
        "2"
    );

    let merged = client
        .patch_merge(
            &CONFIG_MAPS,
            ns,
            "cm",
            &json!({"data": {"b": "x", "a": null}}),
        )
        .unwrap();
    assert_eq!(merged["data"], json!({"b": "x"}));
    // A merge patch carrying a stale resourceVersion is refused too.
    let stale = json!({"metadata": {"resourceVersion": meta::resource_version(&replaced)}, "data": {"c": "y"}});
    let err = client
        .patch_merge(&CONFIG_MAPS, ns, "cm", &stale)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let patched = client
        .patch_json(
            &CONFIG_MAPS,
            ns,
            "cm",
            &json!([{"op": "add", "path": "/data/c", "value": "z"}]),
        )
        .unwrap();
    assert_eq!(patched["data"], json!({"b": "x", "c": "z"}));

    client
        .delete(&CONFIG_MAPS, ns, "cm", Some(Propagation::Background))
        .unwrap();
    let err = client.get(&CONFIG_MAPS, ns, "cm").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.status(), Some(404));
    let err = client.delete(&CONFIG_MAPS, ns, "cm", None).unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // 422 with the field named in the causes.
    let err = client
        .create(&CONFIG_MAPS, ns, &configmap("Not_A_DNS_Name", json!({})))
        .unwrap_err();
    match err {
        Error::Invalid { causes, .. } => {
            assert!(
                causes.iter().any(|c| c.field == "metadata.name"),
                "{causes:?}"
            )
        }
        other => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn capi_cluster_crud_and_status_subresource() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-capi");
    let ns = Some(ns.as_str());

    let created = client.create(&CLUSTERS, ns, &cluster("c1")).unwrap();
    assert_eq!(created["apiVersion"], "cluster.x-k8s.io/v1beta2");
    assert_eq!(created["spec"]["paused"], true);

    // Status subresource: a merge patch touches only .status ...
    let patched = client
        .patch_status_merge(
            &CLUSTERS,
            ns,
            "c1",
            &json!({"status": {"phase": "Provisioning"}, "spec": {"paused": false}}),
        )
        .unwrap();
    assert_eq!(patched["status"]["phase"], "Provisioning");
    assert_eq!(patched["spec"]["paused"], true);

    // ... and the main resource ignores .status.
    let merged = client
        .patch_merge(
            &CLUSTERS,
            ns,
            "c1",
            &json!({"spec": {"paused": false}, "status": {"phase": "Failed"}}),
        )
        .unwrap();
    assert_eq!(merged["spec"]["paused"], false);
    assert_eq!(merged["status"]["phase"], "Provisioning");

    let mut with_status = merged.clone();
    with_status["status"] =
        json!({"phase": "Provisioned", "initialization": {"infrastructureProvisioned": true}});
    let replaced = client
        .replace_status(&CLUSTERS, ns, "c1", &with_status)
        .unwrap();
    assert_eq!(replaced["status"]["phase"], "Provisioned");
    assert_eq!(
        replaced["status"]["initialization"]["infrastructureProvisioned"],
        true
    );
    // Status writes are guarded by resourceVersion too.
    let err = client
        .replace_status(&CLUSTERS, ns, "c1", &with_status)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    // The schema's enum rejects a bad phase with a field cause.
    let err = client
        .patch_status_merge(&CLUSTERS, ns, "c1", &json!({"status": {"phase": "Bogus"}}))
        .unwrap_err();
    match &err {
        Error::Invalid { causes, .. } => {
            assert!(
                causes.iter().any(|c| c.field == "status.phase"),
                "{causes:?}"
            )
        }
        other => panic!("expected Invalid, got {other}"),
    }

    let mut spec = replaced.clone();
    spec["spec"]["paused"] = json!(true);
    let replaced = client.replace(&CLUSTERS, ns, "c1", &spec).unwrap();
    assert_eq!(replaced["spec"]["paused"], true);

    let removed = client
        .patch_json(
            &CLUSTERS,
            ns,
            "c1",
            &json!([{"op": "remove", "path": "/metadata/labels/test"}]),
        )
        .unwrap();
    assert_eq!(meta::label(&removed, "test"), None);

    let listed = client.list(&CLUSTERS, ns, &ListParams::default()).unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0]["kind"], "Cluster");

    client.delete(&CLUSTERS, ns, "c1", None).unwrap();
    let err = client.get(&CLUSTERS, ns, "c1").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
fn list_follows_continue_tokens() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-pages");
    // Whatever the namespace starts with (kube-root-ca.crt, if a
    // controller-manager publishes it).
    let before = client
        .list(&CONFIG_MAPS, Some(&ns), &ListParams::default())
        .unwrap();
    for i in 0..7 {
        let mut cm = configmap(&format!("cm-{i}"), json!({}));
        let parity = if i % 2 == 0 { "even" } else { "odd" };
        cm["metadata"]["labels"] = json!({"parity": parity});
        client.create(&CONFIG_MAPS, Some(&ns), &cm).unwrap();
    }
    // The server really pages at this size: one page is not everything.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?limit=2");
    let (_, first_page) = client.get_raw(&path).unwrap();
    let first_page: Value = serde_json::from_str(&first_page).unwrap();
    assert_eq!(first_page["items"].as_array().unwrap().len(), 2);
    assert!(first_page["metadata"]["continue"].as_str().is_some());

    let params = ListParams {
        limit: Some(2),
        ..ListParams::default()
    };
    let list = client.list(&CONFIG_MAPS, Some(&ns), &params).unwrap();
    let mut names: Vec<_> = list.items.iter().filter_map(meta::name).collect();
    names.sort();
    names.retain(|n| n.starts_with("cm-"));
    assert_eq!(
        names,
        ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-5", "cm-6"]
    );
    assert_eq!(list.items.len(), before.items.len() + 7);
    assert!(!list.resource_version.is_empty());
    assert!(list
        .items
        .iter()
        .all(|i| i["kind"] == "ConfigMap" && i["apiVersion"] == "v1"));

    let odd = ListParams {
        limit: Some(1),
        ..ListParams::labels("parity=odd")
    };
    let odd = client.list(&CONFIG_MAPS, Some(&ns), &odd).unwrap();
    assert_eq!(odd.items.len(), 3);
}

#[test]
fn guarded_finalizer_patches_never_clobber() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-finalizers");
    let ns = Some(ns.as_str());
    // Core objects insist on qualified finalizer names.
    const OURS: &str = "example.com/ours";
    const THEIRS: &str = "example.com/theirs";

    let created = client
        .create(&CONFIG_MAPS, ns, &configmap("f", json!({})))
        .unwrap();
    let with_ours = client.add_finalizer(&CONFIG_MAPS, &created, OURS).unwrap();
    assert_eq!(meta::finalizers(&with_ours), vec![OURS]);
    // Adding again is a no-op, not a duplicate.
    let again = client
        .add_finalizer(&CONFIG_MAPS, &with_ours, OURS)
        .unwrap();
    assert_eq!(meta::finalizers(&again), vec![OURS]);

    // Another writer adds theirs in the meantime; our copy is stale.
    let with_both = client
        .add_finalizer(&CONFIG_MAPS, &with_ours, THEIRS)
        .unwrap();
    assert_eq!(meta::finalizers(&with_both), vec![OURS, THEIRS]);
    // Adding from the stale empty list must fail, not reset the list.
    let err = client
        .add_finalizer(&CONFIG_MAPS, &created, "example.com/third")
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    // Removing ours based on the stale [ours] must fail, not drop theirs.
    let err = client
        .remove_finalizer(&CONFIG_MAPS, &with_ours, OURS)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let current = client.get(&CONFIG_MAPS, ns, "f").unwrap();
    assert_eq!(meta::finalizers(&current), vec![OURS, THEIRS]);

    // From a fresh read it works, and theirs stays.
    let only_theirs = client
        .remove_finalizer(&CONFIG_MAPS, &current, OURS)
        .unwrap();
    assert_eq!(meta::finalizers(&only_theirs), vec![THEIRS]);

    // Deleting waits for the remaining finalizer; none may be added now.
    client.delete(&CONFIG_MAPS, ns, "f", None).unwrap();
    let deleting = client.get(&CONFIG_MAPS, ns, "f").unwrap();
    assert!(meta::is_deleting(&deleting));
    let err = client
        .add_finalizer(&CONFIG_MAPS, &deleting, OURS)
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err}");
    client
        .remove_finalizer(&CONFIG_MAPS, &deleting, THEIRS)
        .unwrap();
    let err = client.get(&CONFIG_MAPS, ns, "f").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

/// Collects a watch's events until the server ends it.
fn drain(client: &Client, ns: &str, params: &WatchParams) -> Vec<WatchEvent> {
    client
        .watch(&CONFIG_MAPS, Some(ns), params)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

#[test]
fn watch_yields_changes_in_order_then_ends_cleanly() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-watch");
    let list = client
        .list(&CONFIG_MAPS, Some(&ns), &ListParams::default())
        .unwrap();

    client
        .create(&CONFIG_MAPS, Some(&ns), &configmap("w", json!({"v": "1"})))
        .unwrap();
    client
        .patch_merge(&CONFIG_MAPS, Some(&ns), "w", &json!({"data": {"v": "2"}}))
        .unwrap();
    client.delete(&CONFIG_MAPS, Some(&ns), "w", None).unwrap();

    let params = WatchParams {
        timeout_seconds: 3,
        allow_bookmarks: false,
        ..WatchParams::after_list(&ListParams::default(), &list.resource_version)
    };
    let events = drain(&client, &ns, &params);
    let summary: Vec<(&str, Option<&str>)> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) => ("added", o["data"]["v"].as_str()),
            WatchEvent::Modified(o) => ("modified", o["data"]["v"].as_str()),
            WatchEvent::Deleted(o) => ("deleted", o["data"]["v"].as_str()),
            WatchEvent::Bookmark { .. } => ("bookmark", None),
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("added", Some("1")),
            ("modified", Some("2")),
            ("deleted", Some("2"))
        ]
    );
    // Resuming from the last event's version sees nothing old again.
    let last = events
        .last()
        .unwrap()
        .resource_version()
        .unwrap()
        .to_string();
    let resumed = drain(
        &client,
        &ns,
        &WatchParams {
            resource_version: Some(last),
            ..params
        },
    );
    assert!(resumed.is_empty(), "{resumed:?}");
}

#[test]
fn watch_sends_bookmarks_when_allowed() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-bookmark");
    let list = client
        .list(&CONFIG_MAPS, Some(&ns), &ListParams::default())
        .unwrap();
    // The watch cache sends a bookmark shortly before the watch's deadline.
    let params = WatchParams {
        timeout_seconds: 5,
        ..WatchParams::after_list(&ListParams::default(), &list.resource_version)
    };
    let events = drain(&client, &ns, &params);
    let bookmark = events
        .iter()
        .find_map(|e| match e {
            WatchEvent::Bookmark { resource_version } => Some(resource_version.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no BOOKMARK in {events:?}"));
    assert!(!bookmark.is_empty());

    let without = WatchParams {
        allow_bookmarks: false,
        ..params
    };
    let events = drain(&client, &ns, &without);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn watch_from_an_expired_version_is_gone() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-gone");
    for i in 0..3 {
        client
            .create(&CLUSTERS, Some(&ns), &cluster(&format!("g{i}")))
            .unwrap();
    }
    // The Cluster watch cache started when the CRD was installed, long after
    // version 1: the server can no longer say what changed since then.
    let params = WatchParams {
        resource_version: Some("1".to_string()),
        timeout_seconds: 5,
        ..WatchParams::default()
    };
    // The 410 may come as the HTTP status or as an ERROR event.
    let err = match client.watch::<Value>(&CLUSTERS, Some(&ns), &params) {
        Err(e) => e,
        Ok(mut stream) => match stream.next() {
            Some(Err(e)) => {
                assert!(stream.next().is_none(), "the stream ends after an error");
                e
            }
            other => panic!("expected an error, got {other:?}"),
        },
    };
    assert!(err.is_gone(), "{err}");

    // The informer's way out: list again, watch from the list's version.
    let list = client
        .list(&CLUSTERS, Some(&ns), &ListParams::default())
        .unwrap();
    assert_eq!(list.items.len(), 3);
    let params = WatchParams {
        timeout_seconds: 2,
        allow_bookmarks: false,
        ..WatchParams::after_list(&ListParams::default(), &list.resource_version)
    };
    let events: Vec<WatchEvent> = client
        .watch(&CLUSTERS, Some(&ns), &params)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn finalizer_helpers_work_on_custom_resources() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("kube-crfinalizer");
    // Not a qualified name, but the Go provider's: custom resources accept
    // it (with a warning), so existing objects keep working.
    const PROVIDER: &str = "maascluster.infrastructure.cluster.x-k8s.io";
    let created = client.create(&CLUSTERS, Some(&ns), &cluster("cf")).unwrap();
    let added = client.add_finalizer(&CLUSTERS, &created, PROVIDER).unwrap();
    assert_eq!(meta::finalizers(&added), vec![PROVIDER]);
    client.delete(&CLUSTERS, Some(&ns), "cf", None).unwrap();
    let deleting = client.get(&CLUSTERS, Some(&ns), "cf").unwrap();
    assert!(meta::is_deleting(&deleting));
    let removed = client
        .remove_finalizer(&CLUSTERS, &deleting, PROVIDER)
        .unwrap();
    assert!(meta::finalizers(&removed).is_empty());
    let err = client.get(&CLUSTERS, Some(&ns), "cf").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
fn namespaced_calls_without_namespace_are_refused_locally() {
    let client = admin();
    let err = client.get(&CONFIG_MAPS, None, "x").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    // Listing across all namespaces is fine.
    client
        .list(
            &NAMESPACES,
            None,
            &ListParams {
                limit: Some(1),
                ..ListParams::default()
            },
        )
        .unwrap();
}
