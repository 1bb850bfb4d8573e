//! The watch's reports routed to MaasMachines, and the orphan report.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::controllers::fake::{FakeKube, FakeMachineQueue};
use crate::controllers::identity;
use crate::maas::{EventLevel, IDENTITY_KEY};

const SOURCE: &str = "http://maas.test/MAAS/api/2.0/";

fn source() -> SourceId {
    SourceId::new(SOURCE, "capmaas")
}

/// A cached MaasMachine `ns/name` with identity `capmaas/ns/name/<nonce>`
/// and, if given, a recorded system id.
fn maas_machine(name: &str, nonce: &str, system_id: Option<&str>) -> Arc<MaasMachine> {
    let mut spec = json!({"image": "ubuntu/jammy"});
    if let Some(id) = system_id {
        spec["systemID"] = json!(id);
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{nonce}"),
                         "annotations": {identity::ANNOTATION: format!("capmaas/ns/{name}/{nonce}")}},
            "spec": spec,
        }))
        .unwrap(),
    )
}

fn machine(system_id: &str, identity: Option<&str>) -> Arc<maas::Machine> {
    let mut m = maas::Machine {
        system_id: system_id.into(),
        hostname: format!("host-{system_id}"),
        status_name: "Deployed".into(),
        owner: Some("capmaas".into()),
        ..maas::Machine::default()
    };
    if let Some(identity) = identity {
        m.owner_data.insert(IDENTITY_KEY.into(), identity.into());
    }
    Arc::new(m)
}

struct Setup {
    router: Router,
    queue: Arc<FakeMachineQueue>,
    kube: Arc<FakeKube>,
}

fn setup(objects: &[Arc<MaasMachine>]) -> Setup {
    let caches = Caches::new();
    for mm in objects {
        caches.maas_machines.upsert(mm.clone());
    }
    let queue = Arc::new(FakeMachineQueue::default());
    let kube = Arc::new(FakeKube::default());
    let tenants = Arc::new(SourceTenants::default());
    tenants.record(&source(), "ns");
    let router = Router {
        caches,
        queue: queue.clone(),
        kube: kube.clone(),
        tenants,
    };
    Setup {
        router,
        queue,
        kube,
    }
}

#[test]
fn a_changed_machine_wakes_the_maas_machine_its_identity_names() {
    let s = setup(&[
        maas_machine("a", "1", Some("sys-a")),
        maas_machine("b", "2", Some("sys-b")),
    ]);
    s.router.on_change(&MachineChange::Appeared {
        source: source(),
        machine: machine("sys-a", Some("capmaas/ns/a/1")),
    });
    assert_eq!(s.queue.take_names(), ["a"]);
    // An identity whose nonce is not the object's (an older object of the
    // same name) wakes nobody: that machine is nobody's now.
    s.router.on_change(&MachineChange::Vanished {
        source: source(),
        last: machine("sys-x", Some("capmaas/ns/a/0")),
    });
    assert!(s.queue.take_names().is_empty());
    // Released and taken by another MaasMachine between two lists: both.
    s.router.on_change(&MachineChange::Changed {
        source: source(),
        old: machine("sys-a", Some("capmaas/ns/a/1")),
        new: machine("sys-a", Some("capmaas/ns/b/2")),
        fields: vec!["owner_data"],
    });
    assert_eq!(s.queue.take_names(), ["a", "b"]);
    // No identity yet (owner data not written): the recorded system id.
    s.router.on_change(&MachineChange::Changed {
        source: source(),
        old: machine("sys-b", None),
        new: machine("sys-b", None),
        fields: vec!["status"],
    });
    assert_eq!(s.queue.take_names(), ["b"]);
    s.router.on_change(&MachineChange::Appeared {
        source: source(),
        machine: machine("sys-unknown", None),
    });
    assert!(s.queue.take_names().is_empty());
}

#[test]
fn maas_events_become_events_on_the_maas_machine() {
    let s = setup(&[maas_machine("a", "1", Some("sys-a"))]);
    let event = |id: i64, kind: &str, description: &str, level: EventLevel| maas::Event {
        id,
        system_id: "sys-a".into(),
        level,
        kind: kind.into(),
        description: description.into(),
        hostname: "host-sys-a".into(),
        username: "unknown".into(),
        created: String::new(),
    };
    s.router.on_change(&MachineChange::Events {
        source: source(),
        machine: machine("sys-a", Some("capmaas/ns/a/1")),
        events: vec![
            event(1, "Performing PXE boot", "", EventLevel::Info),
            event(
                2,
                "Node installation failure",
                "'curtin' curtin command install",
                EventLevel::Error,
            ),
        ],
    });
    let events = s.kube.events.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            (
                "a".to_string(),
                EventType::Normal,
                "MAASPerformingPXEBoot".to_string(),
                "Performing PXE boot".to_string()
            ),
            (
                "a".to_string(),
                EventType::Warning,
                "MAASNodeInstallationFailure".to_string(),
                "Node installation failure - 'curtin' curtin command install".to_string()
            ),
        ]
    );
    assert!(s.queue.take_names().is_empty(), "events wake nobody");
    // Events of a machine no MaasMachine claims go nowhere.
    s.router.on_change(&MachineChange::Events {
        source: source(),
        machine: machine("sys-z", Some("capmaas/ns/z/9")),
        events: vec![event(3, "Deploying", "", EventLevel::Info)],
    });
    assert_eq!(s.kube.events.lock().unwrap().len(), 2);
}

/// Issue 19 item 9: another source (a tenant's own endpoint, whose
/// namespace is not `ns`) listing a machine under a system ID or identity
/// of `ns` wakes nothing and writes no Event there.
#[test]
fn a_source_reaches_only_the_objects_of_the_namespaces_it_serves() {
    let s = setup(&[maas_machine("a", "1", Some("sys-a"))]);
    let hostile = SourceId::new("http://tenant-b.test/MAAS/api/2.0/", "b");
    s.router.tenants.record(&hostile, "tenant-b");
    let event = maas::Event {
        id: 1,
        system_id: "sys-a".into(),
        level: EventLevel::Error,
        kind: "Node installation failure".into(),
        description: "of the tenant's choosing".into(),
        hostname: "host-sys-a".into(),
        username: "unknown".into(),
        created: String::new(),
    };
    for forged in [
        machine("sys-a", None),
        machine("sys-a", Some("capmaas/ns/a/1")),
    ] {
        s.router.on_change(&MachineChange::Appeared {
            source: hostile.clone(),
            machine: forged.clone(),
        });
        s.router.on_change(&MachineChange::Events {
            source: hostile.clone(),
            machine: forged,
            events: vec![event.clone()],
        });
    }
    assert!(s.queue.take_names().is_empty(), "nobody woken");
    assert!(s.kube.events.lock().unwrap().is_empty(), "no Event written");
    // The source `ns` uses still reaches it.
    s.router.on_change(&MachineChange::Appeared {
        source: source(),
        machine: machine("sys-a", None),
    });
    assert_eq!(s.queue.take_names(), ["a"]);
}

#[test]
fn identities_and_event_types_are_read_strictly() {
    assert_eq!(
        key_of_identity("capmaas/ns/name/uid"),
        Some(ObjectKey::new("ns", "name"))
    );
    for bad in [
        "capmaas/ns/name",
        "capmaas/ns//uid",
        "other/ns/name/uid",
        "capmaas/",
    ] {
        assert_eq!(key_of_identity(bad), None, "{bad}");
    }
    assert_eq!(event_reason("Rebooting"), "MAASRebooting");
    assert_eq!(
        event_reason("User marking node broken"),
        "MAASUserMarkingNodeBroken"
    );
    assert_eq!(event_reason(""), "MAASEvent");
    assert_eq!(event_reason("Ünïcode!"), "MAASNCode");
    assert!(event_reason(&"x ".repeat(200)).len() <= 128);
}

#[test]
fn orphans_are_reported_after_two_checks_and_never_touched() {
    let unclaimed = machine("sys-o", Some("capmaas/gone/x/1"));
    let unmarked = machine("sys-u", None);
    let recorded_unmarked = machine("sys-r", None);
    let found = || {
        vec![(
            source(),
            Orphans {
                unclaimed: vec![unclaimed.clone()],
                unmarked: vec![unmarked.clone(), recorded_unmarked.clone()],
            },
        )]
    };
    let recorded: HashSet<&str> = HashSet::from(["sys-r"]);
    let mut report = OrphanReport::default();
    // First seen: a grace period (the caches may not show the allocation
    // yet).
    let first = report.report(found(), &recorded);
    assert!(first[&source()].is_empty());
    let gauge = |name: &str| {
        crate::metrics::render()
            .lines()
            .find(|l| l.starts_with(name) && l.contains(SOURCE))
            .map(str::to_string)
    };
    assert!(gauge("capmaas_orphan_machines{").unwrap().ends_with(" 0"));
    let second = report.report(found(), &recorded);
    assert_eq!(
        second[&source()].iter().collect::<Vec<_>>(),
        ["sys-o"],
        "reported"
    );
    assert!(gauge("capmaas_orphan_machines{").unwrap().ends_with(" 1"));
    assert!(gauge("capmaas_unmarked_machines{").unwrap().ends_with(" 1"));
    // Claimed again (the object came back): no longer reported.
    let claimed = report.report(vec![(source(), Orphans::default())], &HashSet::new());
    assert!(claimed[&source()].is_empty());
}
