//! The machine lifecycle: allocate, deploy, release, power, owner data,
//! broken/fixed, and the admin update, each answering as MAAS does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{
    fail, field_error, split_list, truthy, BootResourceRec, Failure, Machine, Outcome, Pending,
    User, World,
};
use crate::status::Status;

impl World {
    // ---- allocate --------------------------------------------------------

    /// The name checks `FilterNodeForm` makes for allocate and for lists
    /// (`clean_zone`, `clean_pool`, `clean_tags`, `clean_owner` in
    /// `src/maasserver/node_constraint_filter_forms.py`): each unknown name
    /// is a field error, all of them in one 400.
    pub fn unknown_names(&self, params: &[(String, String)]) -> Map<String, Value> {
        let mut errors = Map::new();
        let given = |key: &str| -> Vec<String> {
            params
                .iter()
                .filter(|(k, _)| k == key)
                .flat_map(|(_, v)| split_list(v))
                .collect()
        };
        for field in ["zone", "not_in_zone"] {
            let unknown: Vec<String> = given(field)
                .into_iter()
                .filter(|z| !self.zones.iter().any(|x| &x.name == z))
                .collect();
            if !unknown.is_empty() {
                errors.insert(
                    field.into(),
                    json!([format!("No such zone(s): {}.", unknown.join(", "))]),
                );
            }
        }
        for field in ["pool", "not_in_pool"] {
            let unknown: Vec<String> = given(field)
                .into_iter()
                .filter(|p| !self.pools.iter().any(|x| &x.name == p))
                .collect();
            if !unknown.is_empty() {
                errors.insert(
                    field.into(),
                    json!([format!("No such pool(s): {}.", unknown.join(", "))]),
                );
            }
        }
        let unknown: Vec<String> = given("tags")
            .into_iter()
            .chain(given("not_tags"))
            .filter(|t| !self.tags.contains(t))
            .map(|t| format!("'{t}'"))
            .collect();
        if !unknown.is_empty() {
            errors.insert(
                "tags".into(),
                json!([format!("No such tag(s): {}.", unknown.join(", "))]),
            );
        }
        // Owners are given whole (no comma splitting); the first unknown one
        // is named.
        if let Some((_, owner)) = params
            .iter()
            .find(|(k, v)| k == "owner" && !self.credentials.iter().any(|c| &c.user.username == v))
        {
            errors.insert(
                "owner".into(),
                json!([format!("No such owner: '{owner}'.")]),
            );
        }
        errors
    }

    pub fn allocate(&mut self, user: &User, params: &[(String, String)]) -> Outcome<usize> {
        // AcquireNodeForm's fields; anything else but IGNORED is a 400.
        #[rustfmt::skip]
        const CONSTRAINTS: &[&str] = &[
            "name", "system_id", "arch", "cpu_count", "mem", "tags", "not_tags", "zone",
            "not_in_zone", "pool", "not_in_pool", "storage", "subnets", "not_subnets", "fabrics",
            "not_fabrics", "fabric_classes", "not_fabric_classes", "vlans", "not_vlans",
            "link_speed", "interfaces", "devices", "cpu_speed", "owner", "power_state",
            "deployment_target", "pod", "not_pod", "pod_type", "not_pod_type",
        ];
        #[rustfmt::skip]
        const IGNORED: &[&str] = &[
            "op", "agent_name", "comment", "bridge_all", "bridge_type", "bridge_stp", "bridge_fd",
            "dry_run", "verbose",
        ];
        let mut bad: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, _) in params {
            if !CONSTRAINTS.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()) {
                bad.insert(k.clone(), vec!["No such constraint.".into()]);
            }
        }
        if !bad.is_empty() {
            return Err(Failure::Fields(400, json!(bad)));
        }
        let all = |key: &str| -> Vec<String> {
            params
                .iter()
                .filter(|(k, _)| k == key)
                .flat_map(|(_, v)| split_list(v))
                .collect()
        };
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };

        let cpu = match one("cpu_count") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("cpu_count", "Invalid CPU count: number required."),
            },
            None => None,
        };
        let mem = match one("mem") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("mem", "Invalid memory: number of MiB required."),
            },
            None => None,
        };
        let names = self.unknown_names(params);
        if !names.is_empty() {
            return Err(Failure::Fields(400, Value::Object(names)));
        }
        let zones = all("zone");
        let not_zones = all("not_in_zone");
        let pools = all("pool");
        let not_pools = all("not_in_pool");
        let tags = all("tags");
        let not_tags = all("not_tags");
        let arches = all("arch");
        for arch in &arches {
            let family = arch.split('/').next().unwrap_or("");
            if !["amd64", "arm64", "i386", "armhf", "ppc64el", "s390x"].contains(&family) {
                return field_error("arch", "Architecture not recognised.");
            }
        }
        let storage = match one("storage") {
            Some(v) => match parse_storage(&v) {
                Some(s) => s,
                None => {
                    return field_error(
                        "storage",
                        format!("Malformed storage constraint, \"{v}\"."),
                    )
                }
            },
            None => Vec::new(),
        };
        let name = one("name");
        let system_id = one("system_id");

        let mut candidates: Vec<usize> = (0..self.machines.len())
            .filter(|&i| {
                let m = &self.machines[i];
                m.status == Status::Ready
                    && !m.locked
                    && self.can_view(m, user)
                    && cpu.is_none_or(|c| f64::from(m.cpu_count) >= c)
                    && mem.is_none_or(|c| m.memory as f64 >= c)
                    && (zones.is_empty() || zones.contains(&m.zone))
                    && !not_zones.contains(&m.zone)
                    && (pools.is_empty() || pools.contains(&m.pool))
                    && !not_pools.contains(&m.pool)
                    && tags.iter().all(|t| m.tags.contains(t))
                    && !not_tags.iter().any(|t| m.tags.contains(t))
                    && (arches.is_empty()
                        || arches.iter().any(|a| {
                            a == &m.architecture
                                || !a.contains('/') && m.architecture.starts_with(&format!("{a}/"))
                        }))
                    && name.as_ref().is_none_or(|n| {
                        n == &m.hostname
                            || *n == format!("{}.{}", m.hostname, self.domain_name(m.domain_id))
                    })
                    && system_id.as_ref().is_none_or(|s| s == &m.system_id)
                    && storage_fits(&storage, &m.disks_gb)
            })
            .collect();
        candidates.sort_by(|&a, &b| {
            let cost = |m: &Machine| f64::from(m.cpu_count) + m.memory as f64 / 1024.0;
            let (ma, mb) = (&self.machines[a], &self.machines[b]);
            cost(ma).total_cmp(&cost(mb)).then(ma.seq.cmp(&mb.seq))
        });
        let Some(&index) = candidates.first() else {
            if let Some(id) = system_id {
                return fail(409, format!("No machine with system ID {id} available."));
            }
            let given: Vec<&(String, String)> = params
                .iter()
                .filter(|(k, _)| CONSTRAINTS.contains(&k.as_str()))
                .collect();
            if given.is_empty() {
                return fail(409, "No machine available.");
            }
            return fail(409, no_match_message(&given));
        };
        if one("dry_run").is_some_and(|v| truthy(&v)) {
            return Ok(index);
        }
        let m = &mut self.machines[index];
        m.status = Status::Allocated;
        m.owner = Some(user.username.clone());
        m.agent_name = one("agent_name").unwrap_or_default();
        m.status_message = Some(format!(
            "From 'Ready' to 'Allocated' (to {})",
            user.username
        ));
        if let Some(comment) = one("comment") {
            m.comments.push(comment);
        }
        Ok(index)
    }

    // ---- deploy ----------------------------------------------------------

    /// Every `<os>/<release>` a deploy may name.
    pub fn distro_choices(&self) -> Vec<(String, String, String)> {
        let mut choices: Vec<(String, String, String)> = self
            .boot_resources
            .iter()
            .filter_map(|b| {
                let (os, series) = deployable_os_release(b)?;
                Some((os, series, b.architecture.clone()))
            })
            .collect();
        choices.sort();
        choices
    }

    /// Resolves a `distro_series` value to (osystem, series, architectures).
    fn resolve_series(&self, wanted: &str) -> Option<(String, String, Vec<String>)> {
        let aliases = [
            ("18.04", "bionic"),
            ("20.04", "focal"),
            ("22.04", "jammy"),
            ("24.04", "noble"),
        ];
        let (want_os, want_series) = match wanted.split_once('/') {
            Some((os, s)) => (Some(os), s),
            None => (None, wanted),
        };
        let want_series = aliases
            .iter()
            .find(|(v, _)| *v == want_series)
            .map(|(_, n)| *n)
            .unwrap_or(want_series);
        let matching: Vec<(String, String, String)> = self
            .distro_choices()
            .into_iter()
            .filter(|(os, series, _)| series == want_series && want_os.is_none_or(|w| w == os))
            .collect();
        let (os, series, _) = matching.first()?.clone();
        let arches = matching.into_iter().map(|(_, _, a)| a).collect();
        Some((os, series, arches))
    }

    pub fn deploy(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let m = &self.machines[index];
        match m.status {
            Status::Ready => {
                if m.owner.as_deref().is_some_and(|o| o != user.username) {
                    return fail(409, "Can't allocate a machine belonging to another user.");
                }
            }
            Status::Allocated => {
                if m.owner.as_deref() != Some(&user.username) && !user.is_superuser {
                    return Err(Failure::Text(403, String::new()));
                }
            }
            ref other => {
                return fail(
                    409,
                    format!(
                        "Can't deploy a machine that is in the '{}' state",
                        other.name()
                    ),
                )
            }
        }
        if one("install_kvm").is_some_and(|v| truthy(&v)) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        let wanted = one("distro_series")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.settings.default_distro_series.clone());
        let Some((os, series, arches)) = self.resolve_series(&wanted) else {
            let mut names: Vec<String> = self
                .distro_choices()
                .into_iter()
                .map(|(os, s, _)| format!("'{os}/{s}'"))
                .collect();
            names.dedup();
            let mut list = vec!["''".to_owned()];
            list.extend(names);
            return Err(Failure::Fields(
                400,
                json!({"distro_series": [format!(
                    "'{wanted}' is not a valid distro_series.  It should be one of: {}.",
                    list.join(", ")
                )]}),
            ));
        };
        let m = &self.machines[index];
        let family = m.architecture.split('/').next().unwrap_or("");
        if !arches.iter().any(|a| a.split('/').next() == Some(family)) {
            return fail(
                400,
                format!(
                    "Deployment operating system {os}/{series} is unavailable for {}.",
                    m.architecture
                ),
            );
        }
        if let Some(kernel) = one("hwe_kernel").filter(|k| !k.is_empty()) {
            if !(kernel.starts_with("ga-") || kernel.starts_with("hwe-")) {
                return field_error(
                    "hwe_kernel",
                    format!(
                        "{kernel} is not available for {os}/{series} on {}.",
                        m.architecture
                    ),
                );
            }
        }
        let deploy_for = Duration::from_secs_f64(self.settings.deploy_seconds.max(0.0));
        let m = &mut self.machines[index];
        if m.status == Status::Ready {
            m.owner = Some(user.username.clone());
        }
        if let Some(agent) = one("agent_name") {
            m.agent_name = agent;
        }
        if let Some(comment) = one("comment") {
            m.comments.push(comment);
        }
        m.osystem = os;
        m.distro_series = series;
        m.hwe_kernel = Some(
            one("hwe_kernel")
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "ga-22.04".into()),
        );
        m.ephemeral_deploy = one("ephemeral_deploy").is_some_and(|v| truthy(&v));
        m.user_data = one("user_data");
        start_deployment(m, deploy_for);
        Ok(())
    }

    // ---- release ---------------------------------------------------------

    pub fn release(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let release_for = Duration::from_secs_f64(self.settings.release_seconds.max(0.0));
        let m = &mut self.machines[index];
        if m.owner.as_deref().is_some_and(|o| o != user.username) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        if m.locked {
            return Err(Failure::Text(403, String::new()));
        }
        use Status::*;
        match m.status {
            Ready | Releasing => return Ok(()),
            Allocated | Reserved | Broken | Deploying | Deployed | FailedDeployment
            | FailedDiskErasing | FailedReleasing => {}
            ref other => {
                return fail(
                    409,
                    format!(
                        "Machine cannot be released in its current state ('{}').",
                        other.name()
                    ),
                )
            }
        }
        let flag = |key: &str| params.iter().any(|(k, v)| k == key && truthy(v));
        let erase = flag("erase") || flag("secure_erase") || flag("quick_erase");
        if let Some((_, comment)) = params.iter().find(|(k, _)| k == "comment") {
            m.comments.push(comment.clone());
        }
        m.agent_name.clear();
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        m.fail_deployment = false;
        m.status_before_broken = None;
        if erase {
            m.status = DiskErasing;
            m.status_message = Some("Disk erasing".into());
            m.pending = Some((Pending::Release, Instant::now() + release_for));
        } else if m.power_state == "off" || release_for.is_zero() {
            finish_release(m);
        } else {
            m.status = Releasing;
            m.status_message = Some("Releasing".into());
            m.pending = Some((Pending::Release, Instant::now() + release_for));
        }
        Ok(())
    }

    // ---- power -----------------------------------------------------------

    pub fn power_on(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        let Some(owner) = m.owner.clone() else {
            return fail(409, "Can't start node: it hasn't been allocated.");
        };
        if owner != user.username && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        if m.status == Status::Allocated {
            // MAAS starts a deployment with the defaults (deploy records
            // the comment).
            let defaults: Vec<(String, String)> = params
                .iter()
                .filter(|(k, _)| k == "user_data" || k == "comment")
                .cloned()
                .collect();
            return self.deploy(index, user, &defaults);
        }
        let m = &mut self.machines[index];
        m.power_state = "on".into();
        if let Some((_, comment)) = params.iter().find(|(k, _)| k == "comment") {
            m.comments.push(comment.clone());
        }
        Ok(())
    }

    pub fn power_off(&mut self, index: usize, user: &User) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.owner.as_deref().is_some_and(|o| o != user.username) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        m.power_state = "off".into();
        Ok(())
    }

    // ---- owner data ------------------------------------------------------

    pub fn set_owner_data(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        if m.owner.as_deref() != Some(&user.username) {
            return fail(
                409,
                "Cannot set workload annotation: it hasn't been acquired.",
            );
        }
        // `request.POST.items()`: each key once, with its last value. Only
        // keys being set are checked against `DATA_KEY_RE` (`[\w.-]+$`,
        // `src/maasserver/models/ownerdata.py`); the ValueError is an
        // unhandled 500 and the request's transaction is rolled back.
        let mut items: Vec<(&str, &str)> = Vec::new();
        for (k, v) in params.iter().filter(|(k, _)| k != "op") {
            match items.iter_mut().find(|(key, _)| key == k) {
                Some(item) => item.1 = v,
                None => items.push((k, v)),
            }
        }
        if items.iter().any(|(k, v)| !v.is_empty() && !is_data_key(k)) {
            return fail(500, "Invalid character in key name");
        }
        let m = &mut self.machines[index];
        for (k, v) in items {
            if v.is_empty() {
                m.owner_data.remove(k);
            } else {
                m.owner_data.insert(k.to_owned(), v.to_owned());
            }
        }
        Ok(())
    }

    // ---- other machine ops -------------------------------------------------

    pub fn abort(&mut self, index: usize) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.status != Status::Deploying {
            return fail(
                409,
                format!(
                    "Cannot abort in current state: node {} is in state {}.",
                    m.system_id,
                    m.status.name()
                ),
            );
        }
        m.status = Status::Allocated;
        m.pending = None;
        m.power_state = "off".into();
        Ok(())
    }

    pub fn mark_broken(&mut self, index: usize) {
        let m = &mut self.machines[index];
        if m.status != Status::Broken {
            m.status_before_broken = Some(m.status);
        }
        m.status = Status::Broken;
        m.status_message = Some("Marked broken".into());
        m.pending = None;
    }

    pub fn mark_fixed(&mut self, index: usize) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.status != Status::Broken {
            return fail(409, "Can't mark a non-broken node as 'Ready'.");
        }
        m.status = match m.status_before_broken.take() {
            Some(Status::Deployed) => Status::Deployed,
            _ => Status::Ready,
        };
        Ok(())
    }

    pub fn update_machine(&mut self, index: usize, params: &[(String, String)]) -> Outcome<()> {
        let mut swap = None;
        let mut zone = None;
        let mut pool = None;
        let mut domain = None;
        for (k, v) in params {
            match k.as_str() {
                "swap_size" => match parse_size(v) {
                    Some(n) => swap = Some(n),
                    None => {
                        return field_error("swap_size", "Invalid size for swap: ".to_owned() + v)
                    }
                },
                "zone" => match self.zones.iter().find(|z| &z.name == v) {
                    Some(z) => zone = Some(z.name.clone()),
                    None => {
                        return field_error(
                            "zone",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "pool" => match self.pools.iter().find(|p| &p.name == v) {
                    Some(p) => pool = Some(p.name.clone()),
                    None => {
                        return field_error(
                            "pool",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "domain" => {
                    match self
                        .domains
                        .iter()
                        .find(|d| &d.name == v || d.id.to_string() == *v)
                    {
                        Some(d) => domain = Some(d.id),
                        None => {
                            return field_error(
                                "domain",
                                format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                            )
                        }
                    }
                }
                _ => {}
            }
        }
        let m = &mut self.machines[index];
        for (k, v) in params {
            match k.as_str() {
                "hostname" if !v.is_empty() => m.hostname = v.clone(),
                "description" => m.description = v.clone(),
                _ => {}
            }
        }
        if let Some(s) = swap {
            m.swap_size = Some(s);
        }
        if let Some(z) = zone {
            m.zone = z;
        }
        if let Some(p) = pool {
            m.pool = p;
        }
        if let Some(d) = domain {
            m.domain_id = d;
        }
        Ok(())
    }
}

/// The `(osystem, release)` a boot resource offers to deploy. Synced images
/// are named `os/release`; uploaded custom images are stored without their
/// `custom/` (a bare name is a custom release, as MAAS lists them); the
/// bootloaders (`grub-*`, `pxelinux`, `uboot`) are boot resources one cannot
/// deploy.
fn deployable_os_release(b: &BootResourceRec) -> Option<(String, String)> {
    let name = b.name.trim();
    match name.split_once('/') {
        Some((os, _))
            if os.starts_with("grub") || os.starts_with("pxelinux") || os.starts_with("uboot") =>
        {
            None
        }
        Some((os, release)) => Some((os.to_owned(), release.to_owned())),
        None if !name.is_empty() => Some(("custom".to_owned(), name.to_owned())),
        None => None,
    }
}

fn start_deployment(m: &mut Machine, deploy_for: Duration) {
    m.status = Status::Deploying;
    m.status_message = Some("Deploying".into());
    m.power_state = "on".into();
    m.ip_addresses = m.configured_ips.clone();
    m.pending = Some((Pending::Deploy, Instant::now() + deploy_for));
}

pub(super) fn finish_release(m: &mut Machine) {
    m.status = Status::Ready;
    m.status_message = Some("Released".into());
    m.power_state = "off".into();
    m.owner = None;
    m.owner_data.clear();
    m.agent_name.clear();
    m.osystem.clear();
    m.distro_series.clear();
    m.hwe_kernel = None;
    m.ephemeral_deploy = false;
    m.ip_addresses.clear();
    m.user_data = None;
    m.pending = None;
}

/// Python's `re.match(r"[\w.-]+$", key)`: one or more word characters,
/// dots or dashes, and `$` also matches before one final newline.
fn is_data_key(key: &str) -> bool {
    let key = key.strip_suffix('\n').unwrap_or(key);
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-')
}

/// `label:size(tags),size,...` → sizes in GB (tags are ignored).
fn parse_storage(v: &str) -> Option<Vec<f64>> {
    let mut sizes = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.split('(').next()?;
        let size = entry.rsplit(':').next()?;
        sizes.push(size.trim().parse::<f64>().ok()?);
    }
    Some(sizes)
}

/// The first size is for the boot disk, the rest for other distinct disks.
fn storage_fits(wanted: &[f64], disks: &[u64]) -> bool {
    let Some((&root, rest)) = wanted.split_first() else {
        return true;
    };
    let Some((&boot, others)) = disks.split_first() else {
        return false;
    };
    if (boot as f64) < root {
        return false;
    }
    let mut free: Vec<u64> = others.to_vec();
    for &need in rest {
        match free.iter().position(|&d| d as f64 >= need) {
            Some(i) => {
                free.remove(i);
            }
            None => return false,
        }
    }
    true
}

/// Bytes with optional K/M/G/T suffix.
fn parse_size(v: &str) -> Option<i64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1i64 << 10),
        'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
        'G' | 'g' => (&v[..v.len() - 1], 1 << 30),
        'T' | 't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1),
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then_some((n * mult as f64) as i64)
}

/// `No available machine matches constraints: [('cpu_count', ['4'])] (resolved to "cpu_count=4.0")`
fn no_match_message(given: &[&(String, String)]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut values: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in given {
        if !order.contains(&k.as_str()) {
            order.push(k);
        }
        values.entry(k).or_default().push(v);
    }
    let repr: Vec<String> = order
        .iter()
        .map(|k| {
            let vs: Vec<String> = values[k].iter().map(|v| format!("'{v}'")).collect();
            format!("('{k}', [{}])", vs.join(", "))
        })
        .collect();
    let resolved: Vec<String> = values
        .iter()
        .map(|(k, vs)| {
            let joined: Vec<String> = vs
                .iter()
                .map(|v| match *k {
                    "cpu_count" | "mem" => v
                        .parse::<f64>()
                        .map(|n| format!("{n:?}"))
                        .unwrap_or_else(|_| v.to_string()),
                    _ => v.to_string(),
                })
                .collect();
            format!("{k}={}", joined.join(","))
        })
        .collect();
    format!(
        "No available machine matches constraints: [{}] (resolved to \"{}\")",
        repr.join(", "),
        resolved.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_match_message_matches_maas_format() {
        let a = ("cpu_count".to_owned(), "4".to_owned());
        let b = ("mem".to_owned(), "8192".to_owned());
        let c = ("pool".to_owned(), "default".to_owned());
        let d = ("zone".to_owned(), "default".to_owned());
        assert_eq!(
            no_match_message(&[&a, &b, &c, &d]),
            "No available machine matches constraints: [('cpu_count', ['4']), ('mem', ['8192']), \
             ('pool', ['default']), ('zone', ['default'])] (resolved to \"cpu_count=4.0 mem=8192.0 \
             pool=default zone=default\")"
        );
    }

    #[test]
    fn storage_constraints() {
        assert_eq!(parse_storage("root:50,100(ssd)"), Some(vec![50.0, 100.0]));
        assert_eq!(parse_storage("x:y"), None);
        assert!(storage_fits(&[50.0], &[120]));
        assert!(!storage_fits(&[200.0], &[120, 960]));
        assert!(storage_fits(&[100.0, 500.0], &[120, 960]));
        assert!(!storage_fits(&[100.0, 500.0, 500.0], &[120, 960]));
    }

    #[test]
    fn owner_data_keys_follow_maas_pattern() {
        assert!(is_data_key("capmaas-identity"));
        assert!(is_data_key("a.b_c-9"));
        assert!(is_data_key("ключ"));
        assert!(is_data_key("trailing\n"));
        assert!(!is_data_key(""));
        assert!(!is_data_key("a/b"));
        assert!(!is_data_key("a b"));
        assert!(!is_data_key("a\n\n"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
    }
}
