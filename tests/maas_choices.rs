//! The MAAS choices a MaasMachine spec passes through (issue 15), end to
//! end on the real kube-apiserver, `maas-sim` and the `capmaas` binary, with
//! the cluster's MAAS credentials those of a restricted (non-admin) MAAS user
//! given by `MaasCluster.spec.identityRef`:
//!
//! - allocation constraints reach MAAS and decide the machine: `interfaces`
//!   (a second NIC on a storage subnet), `architecture` with `notInZones`,
//!   `storage`, `notTags`; `machineSelector` pins one machine by hostname;
//! - `deployInMemory` deploys with MAAS's `ephemeral_deploy`;
//! - MAAS refuses the swap edit to a non-admin (403): the machine still
//!   deploys and says so on `SwapDisabled` (reason `SwapUpdateSkipped`) and
//!   in a Warning event; `disableSwap: false` skips the edit;
//! - `diskErase` picks MAAS's erase mode on release, per machine;
//! - `network.addressesFromPools` (with the controller's admin credentials:
//!   MAAS lets only administrators edit interfaces): static addresses from
//!   Cluster API IPAM, the test playing the IPAM provider, set STATIC in
//!   MAAS before deploy and released on delete.
//!
//! MAAS reserves DNS edits for administrators, so this cluster's API record
//! is refused (LoadBalancerReady stays False); workers do not need it.

mod support;

use std::collections::BTreeMap;

use capmaas::maas::MaasApi;
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::objects;
use support::story::Capmaas;
use support::ControlPlane;

const CLUSTER: &str = "choices";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const IMAGE: &str = "ubuntu/jammy";

/// The story inventory plus a storage subnet that only worker-6 is on, and
/// worker-4 made an arm64 machine (with an arm64 jammy to deploy).
fn inventory() -> Value {
    let mut inventory = support::maas_sim::story_inventory();
    inventory["boot_resources"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ubuntu/jammy", "type": "Synced", "architecture": "arm64/ga-22.04"}));
    inventory["subnets"] = json!([{"cidr": "127.20.0.0/24", "name": "storage",
                                   "vlan": {"vid": 20, "fabric": "fabric-storage"}}]);
    for machine in inventory["machines"].as_array_mut().unwrap() {
        match machine["hostname"].as_str().unwrap() {
            "worker-6" => {
                machine["interfaces"] = json!([
                    {"name": "eth0", "links": [{"ip_address": "127.11.130.56"}]},
                    {"name": "eth1", "links": [{"subnet": "storage", "mode": "static", "ip_address": "127.20.0.56"}]},
                ]);
            }
            "worker-4" => machine["architecture"] = json!("arm64/generic"),
            _ => {}
        }
    }
    inventory
}

struct Lab {
    cp: &'static ControlPlane,
    ns: String,
    sim: MaasSim,
    capmaas: Capmaas,
}

impl Lab {
    fn apply(&self, obj: &Value) {
        self.cp.apply(obj);
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        self.cp.get(&self.ns, kind, name)
    }

    fn uid(&self, kind: &str, name: &str) -> String {
        objects::string(&self.get(kind, name).unwrap()["metadata"]["uid"])
    }

    fn add_worker(&self, name: &str, spec: Value) {
        self.add_machine(name, false, spec);
    }

    fn add_machine(&self, name: &str, control_plane: bool, spec: Value) {
        self.cp
            .add_machine(&self.ns, CLUSTER, name, control_plane, spec);
    }

    fn remove_worker(&self, name: &str) {
        for kind in ["maasmachines", "machines.cluster.x-k8s.io"] {
            support::story::delete_no_wait(self.cp, &self.ns, kind, name);
        }
    }

    /// The MaasMachine once it is allocated and MAAS shows its machine
    /// Deployed: (MaasMachine, MAAS machine state).
    fn deployed(&mut self, name: &str) -> (Value, Value) {
        let (sim, capmaas) = (&self.sim, &mut self.capmaas);
        let ns = self.ns.clone();
        let cp = self.cp;
        support::eventually(90, &format!("{name} deployed in MAAS"), || {
            capmaas.assert_running();
            let out = cp
                .try_kubectl(&["get", "maasmachines", name, "-n", &ns, "-o", "json"], "")
                .ok()?;
            let mm: Value = serde_json::from_str(&out).ok()?;
            let system_id = mm["spec"]["systemID"].as_str()?;
            let state = sim.machine_state(system_id);
            (state["status_name"] == "Deployed").then_some((mm, state))
        })
    }
}

/// A namespace, a simulator with `inventory`, capmaas, and the cluster
/// `choices` whose MAAS user is `user` (through `identityRef`), or the
/// controller's admin credentials.
fn start(inventory: &Value, user: Option<&str>) -> Lab {
    start_with(inventory, user, json!({}))
}

/// [`start`] with more fields of the MaasCluster's spec.
fn start_with(inventory: &Value, user: Option<&str>, more_spec: Value) -> Lab {
    let cp = support::control_plane();
    let ns = cp.new_namespace("choices");
    let sim = MaasSim::start_with_args(Some(inventory), &["--dns-listen", "127.0.0.1:0"]);
    sim.set_timings(1.0, 0.5);
    let capmaas = Capmaas::start(
        &support::story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join(format!("capmaas-{ns}.log")),
        &[format!("--namespace={ns}")],
    );
    let lab = Lab {
        cp,
        ns,
        sim,
        capmaas,
    };
    let mut spec = json!({"dnsDomain": "k8s.maas"});
    for (k, v) in more_spec.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    if let Some(user) = user {
        lab.apply(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tenant-maas", "namespace": lab.ns},
            "stringData": {"MAAS_ENDPOINT": lab.sim.url, "MAAS_API_KEY": lab.sim.key_of(user)},
        }));
        spec["identityRef"] = json!({"kind": "Secret", "name": "tenant-maas"});
    }
    lab.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": lab.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster_uid = lab.uid("clusters.cluster.x-k8s.io", CLUSTER);
    lab.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": lab.ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER, "uid": cluster_uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec,
    }));
    lab.apply(&support::capi::kubeconfig_secret(cp, &lab.ns, CLUSTER));
    lab.cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &lab.ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
    lab
}

fn worker(extra: Value) -> Value {
    let mut spec =
        json!({"image": IMAGE, "minCPU": 8, "minMemory": 16384, "resourcePool": "worker-pool"});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

#[test]
fn maas_choices_reach_maas_for_a_restricted_user() {
    // The cluster's MAAS user is the inventory's restricted `operator`.
    let mut lab = start(&inventory(), Some("operator"));

    // The interfaces constraint alone makes MAAS pick worker-6, the most
    // expensive match, over the cheaper worker-2 in the same zone.
    lab.add_worker(
        "picky",
        worker(json!({
            "interfaces": "eth0:subnet=lab;eth1:subnet=storage",
            "notInZones": ["zone-a"],
            "storage": "root:200,data:900",
            "notTags": ["gpu"],
            "deployInMemory": true,
            "diskErase": "Quick",
        })),
    );
    // Architecture with notInZones: the only arm64 machine, worker-4.
    lab.add_worker(
        "arm",
        worker(json!({"architecture": "arm64", "notInZones": ["zone-a"], "disableSwap": false})),
    );
    // An administrator's pin: worker-5, never the cheapest.
    lab.add_worker(
        "pinned",
        worker(json!({"machineSelector": {"hostname": "worker-5"}})),
    );

    let (picky, picky_maas) = lab.deployed("picky");
    assert_eq!(picky_maas["hostname"], "worker-6", "{picky_maas}");
    assert_eq!(picky_maas["owner"], "operator");
    assert_eq!(
        picky_maas["ephemeral_deploy"], true,
        "deployInMemory deploys with ephemeral_deploy: {picky_maas}"
    );
    let (_, arm_maas) = lab.deployed("arm");
    assert_eq!(arm_maas["hostname"], "worker-4", "{arm_maas}");
    let (_, pinned_maas) = lab.deployed("pinned");
    assert_eq!(pinned_maas["hostname"], "worker-5", "{pinned_maas}");

    // MAAS refused the swap edit to the restricted user: deployed anyway,
    // and the MaasMachine says why.
    eprintln!(
        "PICKY {}",
        lab.get("maasmachines", "picky").unwrap()["status"]
    );
    let swap = support::eventually(30, "picky's SwapDisabled condition", || {
        objects::condition(&lab.get("maasmachines", "picky")?, "SwapDisabled").cloned()
    });
    assert_eq!(swap["status"], "False", "{swap}");
    assert_eq!(swap["reason"], "SwapUpdateSkipped", "{swap}");
    assert!(
        swap["message"]
            .as_str()
            .unwrap()
            .contains("only MAAS administrators"),
        "{swap}"
    );
    assert_ne!(picky_maas["swap_size"], 0, "{picky_maas}");
    let events = lab.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &lab.ns,
        "--field-selector",
        "involvedObject.name=picky,reason=SwapUpdateSkipped",
        "-o",
        "json",
    ]);
    let events: Value = serde_json::from_str(&events).unwrap();
    assert_eq!(
        events["items"].as_array().unwrap().len(),
        1,
        "one Warning event, not one per reconcile: {events}"
    );
    let arm_swap = objects::condition(&lab.get("maasmachines", "arm").unwrap(), "SwapDisabled")
        .cloned()
        .unwrap();
    assert_eq!(arm_swap["reason"], "SwapUpdateDisabled", "{arm_swap}");
    assert_ne!(
        objects::condition(&picky, "MachineDeployed").map(|c| c["reason"].clone()),
        Some(json!("DeploymentFailed")),
        "a refused swap edit does not fail the deployment"
    );

    // Release: picky's own erase mode; arm without diskErase follows the
    // controller (no --release-erase: no erase).
    let picky_id = objects::string(&picky["spec"]["systemID"]);
    let arm_id = objects::string(&arm_maas["system_id"]);
    lab.remove_worker("picky");
    lab.remove_worker("arm");
    for (name, system_id) in [("picky", &picky_id), ("arm", &arm_id)] {
        support::eventually(60, &format!("{name} released and gone"), || {
            lab.capmaas.assert_running();
            let state = lab.sim.machine_state(system_id);
            (state["owner"].is_null() && lab.get("maasmachines", name).is_none()).then_some(())
        });
    }
    let picky_release = &lab.sim.machine_state(&picky_id)["last_release"];
    assert_eq!(
        (
            &picky_release["erase"],
            &picky_release["quick_erase"],
            &picky_release["secure_erase"],
            &picky_release["user"]
        ),
        (
            &json!(true),
            &json!(true),
            &json!(false),
            &json!("operator")
        ),
        "{picky_release}"
    );
    let arm_release = &lab.sim.machine_state(&arm_id)["last_release"];
    assert_eq!(arm_release["erase"], false, "{arm_release}");
    assert_eq!(arm_release["quick_erase"], false, "{arm_release}");

    lab.remove_worker("pinned");
    let pinned_id = objects::string(&pinned_maas["system_id"]);
    support::eventually(60, "pinned released", || {
        lab.sim.machine_state(&pinned_id)["owner"]
            .is_null()
            .then_some(())
    });
}

/// Control-plane machines with two NICs: eth0 on the PXE network `lab`
/// (MAAS lists it first) and eth1 on `cluster`, the network the API should
/// be reached on (the Go provider's #385 published the first PXE address).
#[test]
fn multi_nic_control_plane_publishes_the_selected_addresses() {
    let mut inventory = support::maas_sim::story_inventory();
    inventory["subnets"] = json!([{"cidr": "127.20.0.0/24", "name": "cluster",
                                   "vlan": {"vid": 20, "fabric": "fabric-cluster"}}]);
    let mut cluster_ips = std::collections::BTreeSet::new();
    for (n, machine) in inventory["machines"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        if machine["pool"] == "cp-pool" {
            let (pxe, cluster) = (
                format!("127.11.130.{}", 60 + n),
                format!("127.20.0.{}", 60 + n),
            );
            machine["interfaces"] = json!([
                {"name": "eth0", "links": [{"ip_address": pxe}]},
                {"name": "eth1", "links": [{"subnet": "cluster", "mode": "static", "ip_address": cluster}]},
            ]);
            machine.as_object_mut().unwrap().remove("ip_addresses");
            cluster_ips.insert(cluster);
        }
    }
    let mut lab = start(&inventory, None);
    let dns = lab.sim.dns_addr().expect("--dns-listen");
    let cp_spec = |selector: Value| {
        json!({"image": IMAGE, "minCPU": 4, "minMemory": 8192, "resourcePool": "cp-pool",
               "addressSelector": selector})
    };
    // By subnet CIDR, and by subnet name and interface together.
    lab.add_machine("cp-a", true, cp_spec(json!({"subnet": "127.20.0.0/24"})));
    lab.add_machine(
        "cp-b",
        true,
        cp_spec(json!({"subnet": "cluster", "interface": "eth1"})),
    );
    lab.deployed("cp-a");
    lab.deployed("cp-b");

    let fqdn = support::eventually(60, "the API name", || {
        let mc = lab.get("maasclusters", CLUSTER)?;
        mc["status"]["network"]["dnsName"]
            .as_str()
            .map(str::to_string)
    });
    let resolved = support::eventually(60, "the API name resolving to both machines", || {
        lab.capmaas.assert_running();
        let answer = maas_sim::dns::lookup(dns, &fqdn, 1, false).ok()?;
        let ips: std::collections::BTreeSet<String> = answer
            .addresses
            .iter()
            .map(|(ip, _)| ip.to_string())
            .collect();
        (ips.len() == 2).then_some(ips)
    });
    assert!(
        resolved.is_subset(&cluster_ips),
        "only addresses on the cluster network: {resolved:?}"
    );
    for name in ["cp-a", "cp-b"] {
        let mm = lab.get("maasmachines", name).unwrap();
        let ips: Vec<&str> = mm["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["type"] == "InternalIP" || a["type"] == "ExternalIP")
            .map(|a| a["address"].as_str().unwrap())
            .collect();
        assert!(
            !ips.is_empty() && ips.iter().all(|ip| ip.starts_with("127.20.0.")),
            "{name}: status.addresses lists only the selected network: {ips:?}"
        );
    }
}

/// The story inventory with a second network, `nodes` (127.30.0.0/24 on its
/// own VLAN), on every worker's eth1 (an AUTO link, as commissioning
/// leaves it).
fn two_network_inventory() -> Value {
    let mut inventory = support::maas_sim::story_inventory();
    inventory["subnets"] = json!([{"cidr": "127.30.0.0/24", "name": "nodes", "gateway_ip": "127.30.0.1",
                                   "vlan": {"vid": 30, "fabric": "fabric-nodes"}}]);
    for machine in inventory["machines"].as_array_mut().unwrap() {
        if machine["pool"] == "worker-pool" {
            let pxe = machine["ip_addresses"][0].clone();
            machine["interfaces"] = json!([
                {"name": "eth0", "links": [{"ip_address": pxe}]},
                {"name": "eth1", "links": [{"subnet": "nodes", "mode": "auto"}]},
            ]);
            machine.as_object_mut().unwrap().remove("ip_addresses");
        }
    }
    inventory
}

fn pool_ref(name: &str) -> Value {
    json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": name})
}

/// The links of interface `name` as MAAS shows them: (mode, address).
fn links(sim: &MaasSim, system_id: &str, name: &str) -> Vec<(String, Option<String>)> {
    let machine = sim.client().machine(system_id).unwrap();
    let interface = machine.interfaces.iter().find(|i| i.name == name).unwrap();
    interface
        .links
        .iter()
        .map(|l| (l.mode.as_str().to_string(), l.ip.clone()))
        .collect()
}

fn internal_ips(mm: &Value) -> Vec<String> {
    mm["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["type"] == "InternalIP")
        .map(|a| objects::string(&a["address"]))
        .collect()
}

/// Static addresses from Cluster API IPAM pools: the test answers the
/// IPAddressClaims as an IPAM provider; capmaas sets each address STATIC
/// on the chosen interface in MAAS before deploying, reports it, releases
/// it (MAAS link and claim) on delete, and a MaasMachine made again with
/// the same name claims under the same name and gets the address back.
#[test]
fn static_addresses_from_ipam_pools_are_set_in_maas_before_deploy() {
    use std::net::Ipv4Addr;
    use support::ipam::{IpamProvider, Pool};

    let mut lab = start(&two_network_inventory(), None);
    let pools = [
        (
            "lab-pool".to_string(),
            Pool {
                first: Ipv4Addr::new(127, 11, 130, 200),
                last: Ipv4Addr::new(127, 11, 130, 209),
                prefix: 24,
                gateway: Ipv4Addr::new(127, 11, 130, 1),
            },
        ),
        (
            "nodes-pool".to_string(),
            Pool {
                first: Ipv4Addr::new(127, 30, 0, 100),
                last: Ipv4Addr::new(127, 30, 0, 109),
                prefix: 24,
                gateway: Ipv4Addr::new(127, 30, 0, 1),
            },
        ),
    ];
    let _ipam = IpamProvider::start(
        support::story::kube_client(lab.cp),
        &lab.ns,
        pools.into_iter().collect(),
    );

    // On the boot interface (eth0, the PXE network) by default; on eth1
    // when named.
    let boot_spec = worker(json!({"network": {"addressesFromPools": [pool_ref("lab-pool")]}}));
    lab.add_worker("static-boot", boot_spec.clone());
    lab.add_worker(
        "static-eth1",
        worker(json!({"network": {"interface": "eth1",
                                  "addressesFromPools": [pool_ref("nodes-pool")]}})),
    );

    let (boot, _) = lab.deployed("static-boot");
    let boot_id = objects::string(&boot["spec"]["systemID"]);
    assert_eq!(
        links(&lab.sim, &boot_id, "eth0"),
        [("static".to_string(), Some("127.11.130.200".to_string()))],
        "the AUTO link on the PXE network made way for the STATIC one"
    );
    let (eth1, _) = lab.deployed("static-eth1");
    let eth1_id = objects::string(&eth1["spec"]["systemID"]);
    assert_eq!(
        links(&lab.sim, &eth1_id, "eth1"),
        [("static".to_string(), Some("127.30.0.100".to_string()))]
    );
    let eth0 = links(&lab.sim, &eth1_id, "eth0");
    assert!(
        eth0.len() == 1 && eth0[0].0 == "auto" && eth0[0].1.is_some(),
        "eth0 keeps its AUTO address: {eth0:?}"
    );

    // The claim per the contract, owned by the MaasMachine.
    let claim = lab
        .get("ipaddressclaims.ipam.cluster.x-k8s.io", "static-boot-0")
        .expect("claim static-boot-0");
    assert_eq!(claim["spec"]["poolRef"], pool_ref("lab-pool"));
    assert_eq!(
        claim["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        CLUSTER
    );
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"],
        "MaasMachine"
    );
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["uid"],
        boot["metadata"]["uid"]
    );

    // status.addresses shows the static addresses once MAAS reports them.
    for (name, ip) in [
        ("static-boot", "127.11.130.200"),
        ("static-eth1", "127.30.0.100"),
    ] {
        let mm = support::eventually(30, &format!("{name}'s address in status"), || {
            let mm = lab.get("maasmachines", name)?;
            internal_ips(&mm).contains(&ip.to_string()).then_some(mm)
        });
        let ready = objects::condition(&mm, "StaticAddressesReady").unwrap();
        assert_eq!(ready["status"], "True", "{ready}");
    }

    // Delete: the machine is released, the address unlinked in MAAS (which
    // keeps STATIC links on release) and the claim deleted, which the
    // IPAM provider answers by releasing the address.
    lab.remove_worker("static-boot");
    support::eventually(90, "static-boot released and gone", || {
        lab.capmaas.assert_running();
        let state = lab.sim.machine_state(&boot_id);
        (state["owner"].is_null() && lab.get("maasmachines", "static-boot").is_none()).then_some(())
    });
    assert!(
        !links(&lab.sim, &boot_id, "eth0")
            .iter()
            .any(|(_, ip)| ip.as_deref() == Some("127.11.130.200")),
        "unlinked from the released machine"
    );
    support::eventually(30, "the claim and its address gone", || {
        (lab.get("ipaddressclaims.ipam.cluster.x-k8s.io", "static-boot-0")
            .is_none()
            && lab
                .get("ipaddresses.ipam.cluster.x-k8s.io", "static-boot-0")
                .is_none())
        .then_some(())
    });

    // Made again with the same name: the same claim name, the same address.
    lab.add_worker("static-boot", boot_spec);
    let (again, _) = lab.deployed("static-boot");
    let again_id = objects::string(&again["spec"]["systemID"]);
    assert_eq!(
        links(&lab.sim, &again_id, "eth0"),
        [("static".to_string(), Some("127.11.130.200".to_string()))]
    );
    let claim = lab
        .get("ipaddressclaims.ipam.cluster.x-k8s.io", "static-boot-0")
        .expect("claim static-boot-0 again");
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["uid"],
        again["metadata"]["uid"]
    );

    for name in ["static-boot", "static-eth1"] {
        lab.remove_worker(name);
    }
    for name in ["static-boot", "static-eth1"] {
        support::eventually(90, &format!("{name} gone"), || {
            lab.capmaas.assert_running();
            lab.get("maasmachines", name).is_none().then_some(())
        });
    }
}

/// Issue 19: a tenant's MaasMachine names an unallocated machine on whose
/// eth1 an administrator pinned a STATIC address, and the tenant answers
/// its own claim (owned by that MaasMachine) from its own pool with that
/// very address. The machine was never the MaasMachine's: deleting it
/// unlinks nothing, and says so.
#[test]
fn deleting_a_maas_machine_naming_a_machine_never_ours_leaves_its_static_address() {
    use std::net::Ipv4Addr;
    use support::ipam::{IpamProvider, Pool};

    let mut lab = start(&two_network_inventory(), None);
    let admin = lab.sim.client();
    let filter = capmaas::maas::MachineFilter {
        pool: Some("worker-pool".into()),
        ..Default::default()
    };
    let target = admin.machines(&filter).unwrap().remove(0);
    let eth1 = target
        .interfaces
        .iter()
        .find(|i| i.name == "eth1")
        .unwrap()
        .id;
    let nodes = admin
        .subnets()
        .unwrap()
        .into_iter()
        .find(|s| s.name == "nodes")
        .unwrap();
    let pinned = "127.30.0.150";
    admin
        .link_subnet_static(&target.system_id, eth1, nodes.id, pinned)
        .unwrap();
    let pinned_links = links(&lab.sim, &target.system_id, "eth1");
    assert!(
        pinned_links
            .iter()
            .any(|(mode, ip)| mode == "static" && ip.as_deref() == Some(pinned)),
        "{pinned_links:?}"
    );

    let tenant_pool = Pool {
        first: Ipv4Addr::new(127, 30, 0, 150),
        last: Ipv4Addr::new(127, 30, 0, 150),
        prefix: 24,
        gateway: Ipv4Addr::new(127, 30, 0, 1),
    };
    let _ipam = IpamProvider::start(
        support::story::kube_client(lab.cp),
        &lab.ns,
        [("tenant-pool".to_string(), tenant_pool)]
            .into_iter()
            .collect(),
    );
    lab.add_worker(
        "intruder",
        worker(json!({"systemID": target.system_id,
                      "network": {"interface": "eth1",
                                  "addressesFromPools": [pool_ref("tenant-pool")]}})),
    );
    let uid = lab.uid("maasmachines", "intruder");
    lab.apply(&json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
        "metadata": {"name": "intruder-0", "namespace": lab.ns,
                     "ownerReferences": [{"apiVersion": INFRA, "kind": "MaasMachine",
                                          "name": "intruder", "uid": uid}]},
        "spec": {"poolRef": pool_ref("tenant-pool")},
    }));
    support::eventually(60, "the claim answered and the machine refused", || {
        let answered = lab
            .get("ipaddresses.ipam.cluster.x-k8s.io", "intruder-0")
            .is_some();
        let mm = lab.get("maasmachines", "intruder")?;
        let refused = objects::condition(&mm, "MachineDeployed")
            .is_some_and(|c| c["reason"] == "MachineNotOwned");
        (answered && refused).then_some(())
    });

    lab.remove_worker("intruder");
    support::eventually(60, "intruder gone", || {
        lab.capmaas.assert_running();
        lab.get("maasmachines", "intruder").is_none().then_some(())
    });
    assert_eq!(
        links(&lab.sim, &target.system_id, "eth1"),
        pinned_links,
        "the administrator's STATIC address stays linked"
    );
    assert!(lab.sim.machine_state(&target.system_id)["owner"].is_null());
    let events = lab.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &lab.ns,
        "--field-selector",
        "involvedObject.name=intruder,reason=StaticAddressFailed",
        "-o",
        "json",
    ]);
    assert!(
        events.contains("was never this MaasMachine's"),
        "a Warning says why: {events}"
    );
}

/// Issue 19: a Cluster named `choices` whose endpoint names an existing
/// record `choices-abc123.k8s.maas` (another management cluster's API
/// record, made without capmaas's mark) must not make capmaas adopt it
/// with the controller's MAAS key: refused with `LoadBalancerReady=False`
/// (reason `DNSRecordNotOurs`) and a Warning naming the record, and the
/// record is never emptied, repointed nor deleted with the cluster.
#[test]
fn an_endpoint_naming_someone_elses_dns_record_does_not_take_it_over() {
    let victim = format!("{CLUSTER}-abc123.k8s.maas");
    let mut inventory = support::maas_sim::story_inventory();
    inventory["dns_resources"] = json!([{"fqdn": victim, "address_ttl": 10,
                                        "ip_addresses": ["127.11.130.77"]}]);
    let mut lab = start_with(
        &inventory,
        None,
        json!({"controlPlaneEndpoint": {"host": victim, "port": 6443}}),
    );
    let record = |sim: &MaasSim| {
        sim.client()
            .dns_resources(&victim)
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.ip_addresses, r.resource_records))
            .collect::<Vec<_>>()
    };
    let before = record(&lab.sim);
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].1, ["127.11.130.77"]);

    let mc = support::eventually(60, "the record refused", || {
        lab.capmaas.assert_running();
        let mc = lab.get("maasclusters", CLUSTER)?;
        let lb = objects::condition(&mc, "LoadBalancerReady")?;
        (lb["reason"] == "DNSRecordNotOurs").then_some(mc)
    });
    let lb = objects::condition(&mc, "LoadBalancerReady").unwrap();
    assert_eq!(lb["status"], "False");
    assert!(objects::string(&lb["message"]).contains(&victim), "{lb}");
    assert!(mc["status"]["network"]["dnsName"].is_null(), "{mc}");
    let events = lab.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &lab.ns,
        "--field-selector",
        "reason=DNSRecordNotOurs,type=Warning",
        "-o",
        "json",
    ]);
    assert!(
        events.contains(&victim),
        "a Warning names the record: {events}"
    );

    // A control plane deploying meanwhile is not put in it either.
    lab.add_machine("cp-0", true, worker(json!({})));
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(record(&lab.sim), before);

    for kind in ["maasmachines", "machines.cluster.x-k8s.io"] {
        support::story::delete_no_wait(lab.cp, &lab.ns, kind, "cp-0");
    }
    support::story::delete_no_wait(lab.cp, &lab.ns, "maasclusters", CLUSTER);
    support::eventually(90, "MaasCluster gone", || {
        lab.capmaas.assert_running();
        lab.get("maasclusters", CLUSTER).is_none().then_some(())
    });
    assert_eq!(
        record(&lab.sim),
        before,
        "never emptied, repointed or deleted"
    );
}

/// Issue 22 item 3: `spec.lxd.enabled` (the Go provider's field) composes
/// a VM on the LXD VM host of the machine's pool, zone and tags with the
/// most headroom, sized from the spec, deploys it like any machine
/// (providerID set, identity marks) and decomposes it on delete, freeing
/// its host. Prints the MAAS calls from create to Ready (BENCHMARKS.md).
#[test]
fn an_lxd_vm_is_composed_on_the_roomiest_host_deployed_and_decomposed() {
    let mut inventory = support::maas_sim::story_inventory();
    inventory["vm_hosts"] = json!([
        {"name": "lxd-small", "zone": "zone-a", "pool": "worker-pool", "tags": ["vmhost"],
         "cores": 8, "memory": 16384, "storage_gb": 200, "host": "worker-1",
         "vm_addresses": ["127.11.130.201"]},
        {"name": "lxd-big", "zone": "zone-a", "pool": "worker-pool", "tags": ["vmhost"],
         "cores": 32, "memory": 131072, "storage_gb": 2000, "host": "worker-2",
         "vm_addresses": ["127.11.130.202"]},
        {"name": "lxd-untagged", "zone": "zone-a", "pool": "worker-pool",
         "cores": 64, "memory": 262144, "storage_gb": 4000, "vm_addresses": ["127.11.130.203"]},
    ]);
    inventory["settings"]["commission_seconds"] = json!(1.0);
    let mut lab = start(&inventory, None);
    let calls_start = lab.sim.calls();
    let started = std::time::Instant::now();
    lab.add_worker(
        "vm",
        json!({"image": IMAGE, "minCPU": 2, "minMemory": 4096, "resourcePool": "worker-pool",
               "failureDomain": "zone-a", "tags": ["vmhost"],
               "lxd": {"enabled": true, "vmConfig": {"diskSize": 40}}}),
    );
    let (_, vm) = lab.deployed("vm");
    let mm = support::eventually(60, "vm Ready", || {
        let mm = lab.get("maasmachines", "vm")?;
        (mm["status"]["ready"] == true).then_some(mm)
    });
    let calls = lab.sim.calls();
    let per_vm: BTreeMap<&String, u64> = calls
        .iter()
        .map(|(k, v)| (k, v - calls_start.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    eprintln!(
        "MAAS calls for one LXD VM, create → Ready in {:.1}s: {} {per_vm:?}",
        started.elapsed().as_secs_f64(),
        per_vm.values().sum::<u64>()
    );
    assert_eq!(
        per_vm.get(&"POST vm-hosts/{id}/ op=compose".to_string()),
        Some(&1)
    );

    let system_id = objects::string(&vm["system_id"]);
    let vm = lab.sim.machine_state(&system_id);
    assert_eq!(
        vm["hostname"].as_str().unwrap().split('-').next(),
        Some("vm"),
        "{vm}"
    );
    assert_eq!(
        vm["agent_name"],
        mm["metadata"]["annotations"]["capmaas.infrastructure.cluster.x-k8s.io/agent-name"],
        "{vm}"
    );
    assert_eq!(
        mm["spec"]["providerID"],
        json!(format!("maas:///zone-a/{system_id}"))
    );
    assert_eq!(
        mm["spec"]["parent"],
        json!(lab.sim.system_id("worker-2")),
        "lxd-big has the most headroom among the tagged hosts"
    );
    let hosts = lab.sim.client().vm_hosts().unwrap();
    let big = hosts.iter().find(|h| h.name == "lxd-big").unwrap();
    assert_eq!(big.free_cores, 30.0);
    assert_eq!(big.free_storage, 1960e9);

    lab.remove_worker("vm");
    support::eventually(60, "vm decomposed and gone", || {
        lab.capmaas.assert_running();
        let gone = !lab.sim.state()["machines"]
            .as_array()?
            .iter()
            .any(|m| m["system_id"] == json!(system_id));
        (gone && lab.get("maasmachines", "vm").is_none()).then_some(())
    });
    let hosts = lab.sim.client().vm_hosts().unwrap();
    let big = hosts.iter().find(|h| h.name == "lxd-big").unwrap();
    assert_eq!(big.free_cores, 32.0, "decomposed: its host has it back");
    assert_eq!(lab.sim.call_count("POST machines/{id}/ op=release"), 0);
}
