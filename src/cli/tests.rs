//! Every case goes through [`super::parse`], the binary's entry point.

use std::ffi::OsString;
use std::time::Duration;

use super::*;

fn args(a: &[&str]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

/// The controllers' flags, or the refusal's message.
fn parse(a: &[&str]) -> Result<operator::Config, String> {
    match super::parse(args(a)) {
        Ok(Command::Run(config)) => Ok(*config),
        Ok(other) => Err(format!("not a run: {other:?}")),
        Err(e) => Err(e.message),
    }
}

fn adopt(a: &[&str]) -> Result<adopt::Config, String> {
    let mut all = vec!["adopt"];
    all.extend_from_slice(a);
    match super::parse(args(&all)) {
        Ok(Command::Adopt(config)) => Ok(config),
        Ok(other) => Err(format!("not adopt: {other:?}")),
        Err(e) => Err(e.message),
    }
}

fn doctor(a: &[&str]) -> Result<doctor::Config, String> {
    let mut all = vec!["doctor"];
    all.extend_from_slice(a);
    match super::parse(args(&all)) {
        Ok(Command::Doctor(config)) => Ok(config),
        Ok(other) => Err(format!("not doctor: {other:?}")),
        Err(e) => Err(e.message),
    }
}

#[test]
fn defaults_match_the_help_text() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        (c.maascluster_concurrency, c.maasmachine_concurrency),
        (10, 10)
    );
    assert_eq!(c.sync_period, Duration::from_secs(600));
    assert_eq!(c.maas_watch_interval, Duration::from_secs(15));
    assert!(!c.leader_elect && !c.options.no_swap_update && !c.options.release_erase);
    assert_eq!(c.leader_election_id, "capmaas-leader-election");
    assert_eq!(
        c.metrics_bind_address,
        Some("127.0.0.1:8080".parse().unwrap())
    );
    assert_eq!(
        c.health_probe_bind_address,
        Some("0.0.0.0:8081".parse().unwrap())
    );
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    for flag in [
        "--kubeconfig",
        "--namespace",
        "--watch-filter",
        "--maascluster-concurrency",
        "--maasmachine-concurrency",
        "--sync-period",
        "--maas-watch-interval",
        "--leader-elect",
        "--leader-elect-lease-duration",
        "--leader-elect-renew-deadline",
        "--leader-elect-retry-period",
        "--leader-election-id",
        "--leader-election-namespace",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--maas-ca-file",
        "--maas-endpoint-allow",
        "--no-swap-update",
        "--release-erase",
        "--dns-attach-without-api-check",
        "--shutdown-timeout",
    ] {
        assert!(operator::USAGE.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn maas_endpoint_allow_is_a_repeatable_list_of_api_roots() {
    assert!(parse(&[]).unwrap().maas_endpoint_allow.is_empty());
    let c = parse(&[
        "--maas-endpoint-allow=http://a:5240/MAAS, https://b/MAAS/api/2.0/",
        "--maas-endpoint-allow",
        "http://c:5240/MAAS/",
    ])
    .unwrap();
    assert_eq!(
        c.maas_endpoint_allow,
        [
            "http://a:5240/MAAS/api/2.0/",
            "https://b/MAAS/api/2.0/",
            "http://c:5240/MAAS/api/2.0/"
        ]
    );
    let err = parse(&["--maas-endpoint-allow=ftp://a/MAAS"]).unwrap_err();
    assert!(err.starts_with("--maas-endpoint-allow: "), "{err}");
}

#[test]
fn flags_in_both_spellings() {
    let c = parse(&[
        "--namespace=ns1",
        "--sync-period",
        "1m30s",
        "--leader-elect",
        "--release-erase=false",
        "--metrics-bind-address",
        "0",
        "--health-probe-bind-address=:9440",
        "--maasmachine-concurrency",
        "3",
        "--maas-watch-interval=1m",
        "--dns-attach-without-api-check",
    ])
    .unwrap();
    assert!(c.options.dns_attach_without_api_check);
    assert_eq!(c.maas_watch_interval, Duration::from_secs(60));
    assert_eq!(c.namespace.as_deref(), Some("ns1"));
    assert_eq!(c.sync_period, Duration::from_secs(90));
    assert!(c.leader_elect && !c.options.release_erase);
    assert_eq!(c.metrics_bind_address, None);
    assert_eq!(
        c.health_probe_bind_address,
        Some("0.0.0.0:9440".parse().unwrap())
    );
    assert_eq!(c.maasmachine_concurrency, 3);
}

#[test]
fn bad_flags_are_refused_with_their_name() {
    for (args, needle) in [
        (vec!["--bogus"], "--bogus"),
        (vec!["--sync-period", "10"], "--sync-period"),
        (
            vec!["--maascluster-concurrency", "0"],
            "--maascluster-concurrency",
        ),
        (vec!["--namespace"], "--namespace needs a value"),
        (vec!["--leader-elect=yes"], "--leader-elect"),
        (vec!["stray"], "stray"),
    ] {
        let err = parse(&args).unwrap_err();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Issue 12 item 6: this value made `parse_duration` overflow and the
/// process abort (rc 134) before it printed anything.
#[test]
fn overflowing_and_out_of_range_values_are_errors_not_panics() {
    for (args, needle) in [
        (
            vec!["--sync-period", "18446744073709551615s1s"],
            "out of range",
        ),
        (
            vec!["--sync-period", "18446744073709551615h"],
            "out of range",
        ),
        (
            vec!["--sync-period", "99999999999999999999999s"],
            "out of range",
        ),
        (vec!["--sync-period", "0s"], "out of range"),
        (vec!["--sync-period", "25h"], "expected 1s to 24h"),
        (vec!["--maas-watch-interval", "4s"], "expected 5s to 1h"),
        (vec!["--maas-watch-interval", "61m"], "expected 5s to 1h"),
        (vec!["--maas-watch-interval", "15"], "--maas-watch-interval"),
        (vec!["--shutdown-timeout", "2h"], "--shutdown-timeout"),
        (
            vec!["--leader-elect-lease-duration", "500ms"],
            "out of range",
        ),
        (vec!["--leader-elect-retry-period", "1ms"], "out of range"),
        (
            vec!["--maasmachine-concurrency", "18446744073709551616"],
            "1 to 256",
        ),
        (vec!["--maasmachine-concurrency", "257"], "1 to 256"),
        (vec!["--maasmachine-concurrency", "-1"], "1 to 256"),
        (
            vec!["--metrics-bind-address", "127.0.0.1:99999"],
            "host:port",
        ),
        (
            vec!["--metrics-bind-address", "localhost:8080"],
            "IP address",
        ),
        (vec!["--health-probe-bind-address", ":0"], "port 0"),
        (vec!["--namespace", "Team_A"], "namespace name"),
        (vec!["--leader-election-namespace", "-x"], "namespace name"),
        (vec!["--leader-election-id", ""], "must not be empty"),
        (vec!["--leader-election-id", "a/b"], "object name"),
        (vec!["--watch-filter", "a b"], "label value"),
        (vec!["--kubeconfig", ""], "file path"),
        (
            vec!["--leader-elect-renew-deadline", "20s"],
            "must be longer than",
        ),
        (
            vec!["--leader-elect-retry-period", "9s"],
            "1.2 x --leader-elect-retry-period",
        ),
    ] {
        let err = parse(&args).unwrap_err();
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            err.contains(args[0]),
            "{args:?}: {err} does not name the flag"
        );
    }
    let long = "9".repeat(10_000);
    let err = parse(&["--sync-period", &long]).unwrap_err();
    assert!(err.len() < 200, "{err}");
}

#[test]
fn boundaries_are_inclusive() {
    let c = parse(&[
        "--sync-period=24h",
        "--maas-watch-interval=5s",
        "--shutdown-timeout=0s",
        "--maascluster-concurrency=256",
        "--leader-elect-lease-duration=1s",
        "--leader-elect-renew-deadline=500ms",
        "--leader-elect-retry-period=100ms",
        "--leader-election-id=a.b-c",
        "--watch-filter=Team_A.1",
        "--metrics-bind-address=[::1]:65535",
    ])
    .unwrap();
    assert_eq!(c.sync_period, Duration::from_secs(24 * 3600));
    assert_eq!(c.maas_watch_interval, Duration::from_secs(5));
    assert_eq!(
        parse(&["--maas-watch-interval=1h"])
            .unwrap()
            .maas_watch_interval,
        Duration::from_secs(3600)
    );
    assert_eq!(c.shutdown_timeout, Duration::ZERO);
    assert_eq!(c.maascluster_concurrency, 256);
    assert_eq!(c.watch_filter.as_deref(), Some("Team_A.1"));
    assert_eq!(values::human(Duration::from_millis(3_723_004)), "1h2m3s4ms");
}

#[test]
fn durations() {
    assert_eq!(
        values::parse_duration("d", "500ms").unwrap(),
        Duration::from_millis(500)
    );
    assert_eq!(
        values::parse_duration("d", "2h").unwrap(),
        Duration::from_secs(7200)
    );
    assert!(values::parse_duration("d", "").is_err());
    assert!(values::parse_duration("d", "5x").is_err());
    assert!(values::parse_duration("d", "s").is_err());
}

/// Issue 21 item 1: `--apply=false` applied and `--release-orphans=false`
/// released, because the subcommands' parser dropped a switch's value.
#[test]
fn a_switch_is_true_false_or_refused_in_every_command() {
    let a = adopt(&["--all-namespaces", "--apply=false"]).unwrap();
    assert!(!a.apply && a.all_namespaces);
    assert!(
        adopt(&["--all-namespaces=true", "--apply=true"])
            .unwrap()
            .apply
    );
    assert!(adopt(&["--all-namespaces", "--apply"]).unwrap().apply);
    assert!(
        !adopt(&["--namespace=a", "--all-namespaces=false"])
            .unwrap()
            .all_namespaces
    );

    let d = doctor(&["--release-orphans=false"]).unwrap();
    assert!(!d.release_orphans && !d.apply);
    let d = doctor(&["--release-orphans", "--apply=false"]).unwrap();
    assert!(d.release_orphans && !d.apply);
    let d = doctor(&["--release-orphans=true", "--apply"]).unwrap();
    assert!(d.release_orphans && d.apply);

    let c = parse(&[
        "--leader-elect=false",
        "--release-erase=true",
        "--no-swap-update",
    ])
    .unwrap();
    assert!(!c.leader_elect && c.options.release_erase && c.options.no_swap_update);

    for bad in ["maybe", "1", "0", "yes", "no", "TRUE", "False", "", " true"] {
        let flag = format!("--apply={bad}");
        let err = adopt(&["--all-namespaces", &flag]).unwrap_err();
        assert!(err.contains("--apply"), "{flag}: {err}");
        let err = doctor(&["--release-orphans", &flag]).unwrap_err();
        assert!(err.contains("--apply"), "{flag}: {err}");
        let flag = format!("--release-orphans={bad}");
        let err = doctor(&[&flag]).unwrap_err();
        assert!(err.contains("--release-orphans"), "{flag}: {err}");
        for switch in [
            "leader-elect",
            "no-swap-update",
            "release-erase",
            "dns-attach-without-api-check",
        ] {
            let flag = format!("--{switch}={bad}");
            let err = parse(&[&flag]).unwrap_err();
            assert!(err.contains(&format!("--{switch}")), "{flag}: {err}");
        }
    }
    // A switch never takes the next argument: `false` is left over.
    let err = adopt(&["--all-namespaces", "--apply", "false"]).unwrap_err();
    assert!(err.contains("unexpected argument \"false\""), "{err}");
    let err = doctor(&["--release-orphans", "false"]).unwrap_err();
    assert!(err.contains("unexpected argument \"false\""), "{err}");
}

#[test]
fn a_flag_given_twice_is_refused_unless_it_repeats() {
    for (a, flag) in [
        (
            vec!["--all-namespaces", "--apply", "--apply=false"],
            "--apply",
        ),
        (
            vec!["--all-namespaces", "--all-namespaces"],
            "--all-namespaces",
        ),
        (
            vec!["--namespace=a", "--kubeconfig=x", "--kubeconfig=y"],
            "--kubeconfig",
        ),
        (
            vec!["--namespace=a", "--maas-ca-file=x", "--maas-ca-file", "x"],
            "--maas-ca-file",
        ),
        (
            vec![
                "--namespace=a",
                "--created-before=2026-01-01T00:00:00Z",
                "--created-before=2027-01-01T00:00:00Z",
            ],
            "--created-before",
        ),
    ] {
        let err = adopt(&a).unwrap_err();
        assert!(
            err.contains(&format!("{flag} is given more than once")),
            "{a:?}: {err}"
        );
    }
    for a in [
        vec!["--release-orphans", "--release-orphans=false"],
        vec!["--release-orphans", "--apply", "--apply"],
        vec!["--kubeconfig=x", "--kubeconfig=x"],
    ] {
        let err = doctor(&a).unwrap_err();
        assert!(err.contains("is given more than once"), "{a:?}: {err}");
    }
    for a in [
        vec!["--sync-period=1m", "--sync-period=2m"],
        vec!["--leader-elect", "--leader-elect=false"],
        vec!["--namespace=a", "--namespace=b"],
    ] {
        let err = parse(&a).unwrap_err();
        assert!(err.contains("is given more than once"), "{a:?}: {err}");
    }
    // --namespace and --cluster of adopt repeat.
    let a = adopt(&[
        "--namespace",
        "a",
        "--namespace=b",
        "--cluster=c1",
        "--cluster",
        "c2",
    ])
    .unwrap();
    assert_eq!(a.namespaces, ["a", "b"]);
    assert_eq!(a.clusters, ["c1", "c2"]);
}

#[test]
fn unknown_flags_and_stray_arguments_are_refused_in_every_command() {
    for a in [
        vec!["--bogus"],
        vec!["--all-namespaces", "--bogus=1"],
        vec!["--all-namespaces", "-x"],
        vec!["--all-namespaces", "stray"],
        vec!["--all-namespaces", "--", "--apply"],
        vec!["--all-namespaces", "-V"],
        vec!["--all-namespaces", "--release-orphans"],
    ] {
        assert!(adopt(&a).is_err(), "{a:?}");
    }
    let err = adopt(&["--all-namespaces", "--bogus"]).unwrap_err();
    assert!(
        err.contains("unknown flag --bogus (see capmaas adopt --help)"),
        "{err}"
    );
    for a in [
        vec!["--bogus"],
        vec!["--namespace=a"],
        vec!["--all-namespaces"],
        vec!["stray"],
        vec!["--release-orphans", "-a"],
    ] {
        assert!(doctor(&a).is_err(), "{a:?}");
    }
    let err = parse(&["--bogus"]).unwrap_err();
    assert!(
        err.contains("unknown flag --bogus (see capmaas --help)"),
        "{err}"
    );
    // A subcommand is the first argument only.
    let err = parse(&["--leader-elect", "adopt"]).unwrap_err();
    assert!(err.contains("unexpected argument \"adopt\""), "{err}");
}

#[test]
fn subcommands_check_their_flags_together() {
    let err = adopt(&[]).unwrap_err();
    assert!(err.contains("--all-namespaces"), "{err}");
    let err = adopt(&["--all-namespaces", "--namespace", "a"]).unwrap_err();
    assert!(err.contains("exclude each other"), "{err}");
    let err = adopt(&["--namespace"]).unwrap_err();
    assert!(err.contains("--namespace needs a value"), "{err}");
    let err = adopt(&["--namespace", "Not_A_Namespace"]).unwrap_err();
    assert!(err.contains("--namespace"), "{err}");
    let err = adopt(&["--namespace=a", "--cluster=Bad_Name"]).unwrap_err();
    assert!(err.contains("--cluster"), "{err}");
    let err = adopt(&["--namespace=a", "--created-before=yesterday"]).unwrap_err();
    assert!(
        err.contains("--created-before: expected an RFC 3339 time"),
        "{err}"
    );
    let a = adopt(&[
        "--namespace=a",
        "--created-before=2026-12-01T01:00:00+01:00",
    ])
    .unwrap();
    assert_eq!(
        a.created_before,
        crate::kube::time::unix_seconds("2026-12-01T00:00:00Z")
    );
    let a = adopt(&["--all-namespaces"]).unwrap();
    assert!(
        !a.apply && a.created_before.is_none() && a.clusters.is_empty(),
        "a dry run unless asked"
    );

    let err = doctor(&["--apply"]).unwrap_err();
    assert!(err.contains("--apply goes with --release-orphans"), "{err}");
    // Saying no to --apply needs no --release-orphans.
    let d = doctor(&["--apply=false"]).unwrap();
    assert!(!d.apply && !d.release_orphans);
}

#[test]
fn help_and_version_per_command() {
    let help = |a: &[&str]| match super::parse(args(a)) {
        Ok(Command::Help(usage)) => usage,
        other => panic!("{a:?}: {other:?}"),
    };
    assert_eq!(help(&["--help"]), operator::USAGE);
    assert_eq!(help(&["--sync-period=1m", "-h"]), operator::USAGE);
    assert_eq!(help(&["adopt", "--help"]), adopt::USAGE);
    assert_eq!(help(&["adopt", "-h"]), adopt::USAGE);
    assert_eq!(
        help(&["doctor", "--release-orphans", "--help"]),
        doctor::USAGE
    );
    assert!(matches!(super::parse(args(&["-V"])), Ok(Command::Version)));
    assert!(matches!(
        super::parse(args(&["--version"])),
        Ok(Command::Version)
    ));
    let err = super::parse(args(&["adopt", "--help=false"])).unwrap_err();
    assert_eq!(err.command, "capmaas adopt");
    assert!(err.message.contains("--help takes no value"), "{err}");
}

/// The usage text and the table list the same flags, so that a flag
/// added to one is not missing from the other.
#[test]
fn every_usage_lists_exactly_its_flags() {
    fn listed(usage: &str) -> Vec<String> {
        let flags_section = usage.split("FLAGS:").nth(1).unwrap();
        let mut out: Vec<String> = flags_section
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("--"))
            .map(|l| l.split([' ', '[']).next().unwrap().to_string())
            .filter(|f| f != "help" && f != "version")
            .collect();
        // "-h, --help" and "-V, --version" lines start with a dash only.
        out.sort();
        out
    }
    fn names<C>(flags: &[Flag<C>]) -> Vec<String> {
        let mut out: Vec<String> = flags.iter().map(|f| f.name.to_string()).collect();
        out.sort();
        out
    }
    assert_eq!(listed(operator::USAGE), names(operator::FLAGS));
    assert_eq!(listed(adopt::USAGE), names(adopt::FLAGS));
    assert_eq!(listed(doctor::USAGE), names(doctor::FLAGS));
}

#[test]
fn values_are_checked_for_length_and_encoding() {
    let long = "a".repeat(5000);
    let err = parse(&["--kubeconfig", &long]).unwrap_err();
    assert!(err.contains("value too long") && err.len() < 200, "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let bad = vec![
            OsString::from("adopt"),
            OsString::from("--namespace"),
            OsString::from_vec(vec![0xff, 0xfe]),
        ];
        let err = super::parse(bad).unwrap_err();
        assert!(err.message.contains("not valid UTF-8"), "{err}");
    }
}
