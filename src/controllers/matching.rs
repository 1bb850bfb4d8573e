//! Which MAAS machines a MaasMachine spec's constraints match, as MAAS's
//! allocation would pick them (pool, tags, at least the CPUs, memory and
//! disk asked for), and the smallest of them: what `capmaas doctor` counts
//! for capacity and what a template promises the cluster-autoscaler.

use crate::api::MaasMachineSpec;
use crate::maas::{Machine, MachineStatus};

/// Whether MAAS could hand out `machine` for `spec` (state aside). MAAS's
/// `storage` and `interfaces` constraints are not evaluated here (the
/// machine list does not show disks and links in enough detail): such a
/// template matches a superset, whose minimums never exceed the true ones.
pub fn matches(spec: &MaasMachineSpec, machine: &Machine) -> bool {
    let options = spec.options();
    let at_least = |want: Option<i64>, have: f64| want.is_none_or(|w| w <= 0 || have >= w as f64);
    let pool_ok = spec
        .resource_pool
        .as_deref()
        .filter(|p| !p.is_empty())
        .is_none_or(|p| machine.pool == p);
    let zone_ok = spec
        .failure_domain
        .as_deref()
        .filter(|z| !z.is_empty())
        .is_none_or(|z| machine.zone == z);
    let tags_ok = spec.tags.iter().all(|t| machine.tag_names.contains(t))
        && !options
            .not_tags
            .iter()
            .any(|t| machine.tag_names.contains(t));
    let not_in_zones_ok = !options.not_in_zones.contains(&machine.zone);
    // `amd64` matches every `amd64/<subarch>`, as MAAS's `arch` does.
    let arch_ok = options
        .architecture
        .as_deref()
        .filter(|a| !a.is_empty())
        .is_none_or(|a| {
            machine.architecture == a
                || (!a.contains('/') && machine.architecture.split('/').next() == Some(a))
        });
    let selector_ok = options.machine_selector.as_ref().is_none_or(|s| {
        s.system_id
            .as_deref()
            .is_none_or(|id| machine.system_id == id)
            && s.hostname.as_deref().is_none_or(|h| machine.hostname == h)
    });
    pool_ok
        && zone_ok
        && tags_ok
        && not_in_zones_ok
        && arch_ok
        && selector_ok
        && at_least(spec.min_cpu, f64::from(machine.cpu_count))
        && at_least(spec.min_memory, machine.memory as f64)
        && at_least(spec.min_disk_size, machine.storage_gb())
}

/// Free for an allocation now: Ready and not locked.
pub fn is_free(machine: &Machine) -> bool {
    machine.status == MachineStatus::Ready && !machine.locked
}

/// What every machine matching a template has at least: each figure is the
/// minimum over the matches, so a node built from the template is never
/// smaller than promised.
#[derive(Debug, Clone, PartialEq)]
pub struct Smallest {
    pub cpu: u32,
    /// MiB, as MAAS reports memory.
    pub memory_mib: u64,
    /// Decimal GB of physical disk.
    pub storage_gb: f64,
    /// The Kubernetes architecture (`amd64`, `arm64`) when every match has
    /// the same one; None when they differ or MAAS does not say.
    pub architecture: Option<String>,
    /// How many machines matched.
    pub matches: usize,
}

/// The smallest of the machines matching `spec`, None when none does.
pub fn smallest<'m>(
    spec: &MaasMachineSpec,
    machines: impl IntoIterator<Item = &'m Machine>,
) -> Option<Smallest> {
    let mut out: Option<Smallest> = None;
    for m in machines.into_iter().filter(|m| matches(spec, m)) {
        let arch = kubernetes_architecture(&m.architecture);
        match &mut out {
            None => {
                out = Some(Smallest {
                    cpu: m.cpu_count,
                    memory_mib: m.memory,
                    storage_gb: m.storage_gb(),
                    architecture: arch,
                    matches: 1,
                })
            }
            Some(s) => {
                s.cpu = s.cpu.min(m.cpu_count);
                s.memory_mib = s.memory_mib.min(m.memory);
                s.storage_gb = s.storage_gb.min(m.storage_gb());
                if s.architecture != arch {
                    s.architecture = None;
                }
                s.matches += 1;
            }
        }
    }
    out
}

/// MAAS's `amd64/generic` → `amd64` (Kubernetes' `kubernetes.io/arch`,
/// Debian's names translated: `armhf` → `arm`, `ppc64el` → `ppc64le`);
/// None for what Kubernetes has no name for.
fn kubernetes_architecture(maas: &str) -> Option<String> {
    let arch = match maas.split('/').next().unwrap_or_default().trim() {
        "armhf" => "arm",
        "ppc64el" => "ppc64le",
        known @ ("amd64" | "arm64" | "s390x" | "i386" | "riscv64") => known,
        _ => return None,
    };
    Some(arch.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpu: u32, memory: u64, storage_mb: f64, pool: &str, tags: &[&str]) -> Machine {
        Machine {
            cpu_count: cpu,
            memory,
            storage: storage_mb,
            pool: pool.into(),
            zone: "zone-a".into(),
            architecture: "amd64/generic".into(),
            tag_names: tags.iter().map(|t| t.to_string()).collect(),
            status: MachineStatus::Ready,
            ..Machine::default()
        }
    }

    fn spec(cpu: i64, memory: i64, pool: &str, tags: &[&str]) -> MaasMachineSpec {
        MaasMachineSpec {
            min_cpu: Some(cpu),
            min_memory: Some(memory),
            resource_pool: Some(pool.into()),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..MaasMachineSpec::default()
        }
    }

    #[test]
    fn constraints_are_minimums_and_pool_and_tags_must_match() {
        let s = spec(4, 8192, "p", &["worker"]);
        assert!(matches(&s, &machine(4, 8192, 1.0, "p", &["worker", "x"])));
        assert!(!matches(&s, &machine(2, 8192, 1.0, "p", &["worker"])));
        assert!(!matches(&s, &machine(4, 4096, 1.0, "p", &["worker"])));
        assert!(!matches(&s, &machine(4, 8192, 1.0, "q", &["worker"])));
        assert!(!matches(&s, &machine(4, 8192, 1.0, "p", &[])));
        let disk = MaasMachineSpec {
            min_disk_size: Some(100),
            ..MaasMachineSpec::default()
        };
        assert!(matches(&disk, &machine(1, 1, 120_000.0, "p", &[])));
        assert!(!matches(&disk, &machine(1, 1, 80_000.0, "p", &[])));
        assert!(matches(
            &MaasMachineSpec::default(),
            &machine(1, 1, 0.0, "", &[])
        ));
        let mut excluding = MaasMachineSpec::default();
        let options = excluding.options_mut();
        options.not_tags = vec!["gpu".into()];
        options.not_in_zones = vec!["zone-b".into()];
        options.architecture = Some("amd64".into());
        assert!(matches(&excluding, &machine(1, 1, 0.0, "p", &["x"])));
        assert!(!matches(&excluding, &machine(1, 1, 0.0, "p", &["gpu"])));
        let mut in_b = machine(1, 1, 0.0, "p", &[]);
        in_b.zone = "zone-b".into();
        assert!(!matches(&excluding, &in_b));
        let mut arm = machine(1, 1, 0.0, "p", &[]);
        arm.architecture = "arm64/generic".into();
        assert!(!matches(&excluding, &arm));
    }

    #[test]
    fn the_smallest_match_is_the_minimum_of_each_figure() {
        let s = spec(4, 8192, "p", &[]);
        let mut arm = machine(16, 8192, 500_000.0, "p", &[]);
        arm.architecture = "arm64/generic".into();
        let machines = [
            machine(8, 65536, 200_000.0, "p", &[]),
            machine(32, 16384, 100_000.0, "p", &[]),
            machine(2, 1024, 10_000.0, "p", &[]), // too small: not a match
        ];
        let smallest_amd = smallest(&s, &machines).unwrap();
        assert_eq!(
            (
                smallest_amd.cpu,
                smallest_amd.memory_mib,
                smallest_amd.matches
            ),
            (8, 16384, 2)
        );
        assert_eq!(smallest_amd.storage_gb, 100.0);
        assert_eq!(smallest_amd.architecture.as_deref(), Some("amd64"));
        let mixed = smallest(&s, machines.iter().chain([&arm])).unwrap();
        assert_eq!(mixed.architecture, None, "mixed architectures promise none");
        assert!(smallest(&spec(64, 1, "p", &[]), &machines).is_none());
        assert_eq!(
            kubernetes_architecture("ppc64el/generic").as_deref(),
            Some("ppc64le")
        );
        assert_eq!(kubernetes_architecture("weird/x"), None);
    }
}
