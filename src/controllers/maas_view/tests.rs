//! What `MaasView` answers without asking MAAS, and when it asks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::controllers::fake::{FakeMaas, FakeView};
use crate::maas::watch::{MaasWatch, Reader, WatchConfig};
use crate::maas::{DeployRequest, EventQuery, MachineStatus, PowerState};

fn count(maas: &FakeMaas, op: &str) -> usize {
    maas.calls()
        .iter()
        .filter(|c| c.split(' ').next() == Some(op))
        .count()
}

/// A deploy, as the reconciler writes it.
fn deploy(api: &MaasView, id: &str) -> Result<maas::Machine, maas::Error> {
    api.write(id, |client| client.deploy(id, &DeployRequest::default()))
}

/// A view of `maas` with a watch view the test lists.
fn watched(maas: &Arc<FakeMaas>) -> (MaasView, Arc<FakeView>) {
    let view = Arc::new(FakeView::new(maas.clone()));
    let api = MaasView::new(maas.clone());
    api.attach(Box::new(view.clone()));
    (api, view)
}

/// Allocates `system_id`'s machine to the fake's user (as another
/// reconcile would have), and returns it.
fn allocated(maas: &FakeMaas) -> String {
    let host = maas.allocate(&AllocateRequest::default()).unwrap();
    host.system_id
}

/// Issue 22: the version is read once for every machine that needs it; a
/// failed read is not remembered.
#[test]
fn the_version_is_read_once_for_every_machine() {
    let maas = Arc::new(FakeMaas::with_machines(0));
    let api = MaasView::new(maas.clone());
    maas.fail_once("version", 503, "busy");
    assert!(api.version().is_err());
    for _ in 0..10 {
        assert_eq!(api.version().unwrap().version, "3.6.0");
    }
    assert_eq!(count(&maas, "version"), 2);
}

#[test]
fn boot_resources_are_read_once_for_every_machine() {
    let maas = Arc::new(FakeMaas::with_machines(0));
    let api = MaasView::new(maas.clone());
    for _ in 0..100 {
        assert_eq!(api.boot_resources().unwrap().len(), 2);
    }
    assert_eq!(count(&maas, "boot_resources"), 1);
    // Workers asking at the same moment share one read.
    let shared = Arc::new(MaasView::new(maas.clone()));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || shared.boot_resources().unwrap().len())
        })
        .collect();
    for worker in workers {
        assert_eq!(worker.join().unwrap(), 2);
    }
    assert_eq!(count(&maas, "boot_resources"), 2);
    // A failed read is not remembered.
    let fresh = MaasView::new(maas.clone());
    maas.fail_once("boot_resources", 503, "busy");
    assert!(fresh.boot_resources().is_err());
    assert!(fresh.boot_resources().is_ok());
    assert_eq!(count(&maas, "boot_resources"), 4);
}

#[test]
fn dns_records_are_answered_as_last_read_or_written() {
    let maas = Arc::new(FakeMaas::with_machines(0));
    let api = MaasView::new(maas.clone());
    let fqdn = "c1-abcdef.maas";
    // Nothing known: read.
    assert!(api.recent_dns_resources(fqdn).unwrap().is_empty());
    assert_eq!(count(&maas, "dns_resources"), 1);
    // The cluster creates the record; machines see it without a read.
    let record = api
        .create_dns_resource(fqdn, 10, &["10.0.0.1".into()])
        .unwrap();
    let seen = api.recent_dns_resources(fqdn).unwrap();
    assert_eq!(seen[0].ip_addresses, ["10.0.0.1"]);
    // The cluster's writes show at once.
    api.set_dns_resource_ips(record.id, &["10.0.0.1".into(), "10.0.0.2".into()])
        .unwrap();
    let seen = api.recent_dns_resources(fqdn).unwrap();
    assert_eq!(seen[0].ip_addresses, ["10.0.0.1", "10.0.0.2"]);
    assert_eq!(count(&maas, "dns_resources"), 1, "{:?}", maas.calls());
    // A write whose outcome is unknown: the next check reads MAAS.
    maas.fail_once("set_dns_resource_ips", 503, "busy");
    assert!(api.set_dns_resource_ips(record.id, &[]).is_err());
    let seen = api.recent_dns_resources(fqdn).unwrap();
    assert_eq!(seen[0].ip_addresses, ["10.0.0.1", "10.0.0.2"]);
    assert_eq!(count(&maas, "dns_resources"), 2);
    // Deleted: gone for the machines too.
    api.delete_dns_resource(record.id).unwrap();
    assert!(api.recent_dns_resources(fqdn).unwrap().is_empty());
    assert_eq!(count(&maas, "dns_resources"), 2);
    // `dns_resources` always asks MAAS (a record's deletion reads so).
    api.dns_resources(fqdn).unwrap();
    assert_eq!(count(&maas, "dns_resources"), 3);
}

#[test]
fn the_allocation_lookup_is_skipped_only_for_an_identity_never_sent() {
    let maas = Arc::new(FakeMaas::with_machines(0));
    let api = MaasView::new(maas.clone());
    let identity = "capmaas/ns/m1/uid-1";
    // Another process's (or an earlier run's) identity: asked.
    api.machines_by_agent_name(identity).unwrap();
    assert_eq!(count(&maas, "machines_by_agent_name"), 1);
    api.chose_identity(identity);
    assert!(api.machines_by_agent_name(identity).unwrap().is_empty());
    assert_eq!(count(&maas, "machines_by_agent_name"), 1);
    // Refused (nothing matches): still nothing under it.
    let request = AllocateRequest {
        agent_name: Some(identity.into()),
        ..AllocateRequest::default()
    };
    assert!(api.allocate(&request).unwrap_err().is_conflict());
    api.machines_by_agent_name(identity).unwrap();
    assert_eq!(count(&maas, "machines_by_agent_name"), 1);
    // An allocate whose answer is lost: MAAS may hold one; asked again,
    // and it does.
    maas.add_ready("sys001", "h1", "az1", 4, 8192);
    maas.faults.lock().unwrap().lose_allocate_answer = true;
    assert!(api.allocate(&request).is_err());
    assert_eq!(api.machines_by_agent_name(identity).unwrap().len(), 1);
    assert_eq!(count(&maas, "machines_by_agent_name"), 2);
    // A refusal after that proves nothing about the lost one.
    assert!(api.allocate(&request).unwrap_err().is_conflict());
    api.machines_by_agent_name(identity).unwrap();
    assert_eq!(count(&maas, "machines_by_agent_name"), 3);
}

#[test]
fn the_view_stands_in_for_a_read_until_this_process_writes() {
    let maas = Arc::new(FakeMaas::with_machines(2));
    let (api, view) = watched(&maas);
    let id = allocated(&maas);
    // Not listed yet: unknown.
    assert!(matches!(api.watched(&id), Lookup::Unknown));
    view.list();
    assert!(api.is_watched());
    let Lookup::Owned(listed) = api.watched(&id) else {
        panic!("listed");
    };
    assert_eq!(listed.machine.status, MachineStatus::Allocated);
    assert!(matches!(api.watched("sys001"), Lookup::NotOwned));
    // A deploy's answer is recorded: no second deploy from a stale view.
    deploy(&api, &id).unwrap();
    let Lookup::Owned(listed) = api.watched(&id) else {
        panic!("recorded");
    };
    assert_eq!(listed.machine.status, MachineStatus::Deploying);
    // A power-on's answer does not show its effect: read MAAS next time,
    // and that read is recorded.
    api.write(&id, |client| {
        client.power_on_with_comment(&id, None).map(drop)
    })
    .unwrap();
    assert!(matches!(api.watched(&id), Lookup::Unknown));
    api.machine(&id).unwrap();
    assert!(matches!(api.watched(&id), Lookup::Owned(_)));
    // A write whose answer is lost, the same.
    maas.set_state(&id, MachineStatus::Allocated, "Allocated", PowerState::Off);
    view.list();
    maas.faults.lock().unwrap().lose_deploy_answer = true;
    assert!(deploy(&api, &id).is_err());
    assert!(matches!(api.watched(&id), Lookup::Unknown));
    // The next list is newer than the write.
    view.list();
    let Lookup::Owned(listed) = api.watched(&id) else {
        panic!("listed");
    };
    assert_eq!(listed.machine.status, MachineStatus::Deploying);
    // Lists failing: the view is not fresh any more.
    view.go_stale();
    assert!(!api.is_watched());
    // Without a watch: never watched, always unknown.
    let plain = MaasView::new(maas.clone());
    assert!(!plain.is_watched());
    assert!(matches!(plain.watched(&id), Lookup::Unknown));
}

/// The controllers' fake MAAS listed by the real watch thread.
impl Reader for FakeMaas {
    fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<maas::Machine>>, maas::Error> {
        Ok(self
            .machines
            .lock()
            .unwrap()
            .values()
            .filter(|m| m.owner.as_deref() == Some(owner))
            .map(|m| Arc::new(m.clone()))
            .collect())
    }

    fn events(&self, _query: &EventQuery) -> Result<Vec<maas::Event>, maas::Error> {
        Ok(Vec::new())
    }
}

#[test]
fn a_source_of_the_running_watch_is_read_through() {
    let maas = Arc::new(FakeMaas::with_machines(2));
    let id = allocated(&maas);
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let watch = MaasWatch::spawn(
        WatchConfig::default().interval(Duration::from_secs(3600)),
        |_| {},
        stop_rx,
    )
    .unwrap();
    let source = SourceId::new("http://maas.test/MAAS/api/2.0/", "capmaas");
    let reader: Arc<dyn Reader> = maas.clone();
    watch.set_readers(vec![(source.clone(), reader)]);
    let api = MaasView::new(maas.clone());
    api.attach(Box::new(SourceView {
        handle: watch.handle(),
        source,
    }));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !api.is_watched() {
        assert!(Instant::now() < deadline, "the first list did not come");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(api.watched(&id), Lookup::Owned(_)));
    assert!(matches!(api.watched("sys001"), Lookup::NotOwned));
    deploy(&api, &id).unwrap();
    let Lookup::Owned(listed) = api.watched(&id) else {
        panic!("recorded");
    };
    assert_eq!(listed.machine.status, MachineStatus::Deploying);
    stop.send(()).unwrap();
    assert!(watch.join(Duration::from_secs(5)));
}
