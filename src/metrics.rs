//! The process-wide metrics registry, rendered as Prometheus text by `serve`.
//!
//! Every layer records into one registry through four calls, so no layer
//! needs to know about HTTP or about the others. Names follow
//! controller-runtime where they mean the same thing
//! (`controller_runtime_reconcile_total`, `workqueue_depth`, ...), so existing
//! dashboards keep working.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Upper bounds of histogram buckets, in seconds (Prometheus' defaults plus
/// the longer tail controller-runtime adds for slow reconciles).
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0,
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

struct Family {
    help: &'static str,
    kind: Kind,
    /// Rendered label set (`a="x",b="y"`) → value.
    series: BTreeMap<String, Series>,
}

enum Series {
    Value(f64),
    Histogram {
        counts: [u64; BUCKETS.len()],
        sum: f64,
        count: u64,
    },
}

fn registry() -> MutexGuard<'static, BTreeMap<&'static str, Family>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<&'static str, Family>>> = OnceLock::new();
    let lock = REGISTRY.get_or_init(|| Mutex::new(BTreeMap::new())).lock();
    // A panic while holding the lock leaves plain numbers behind; they are
    // still good to read, so poisoning is ignored.
    lock.unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn series<'a>(
    families: &'a mut BTreeMap<&'static str, Family>,
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &[(&str, &str)],
) -> &'a mut Series {
    let family = families.entry(name).or_insert_with(|| Family {
        help,
        kind,
        series: BTreeMap::new(),
    });
    let key = render_labels(labels);
    family.series.entry(key).or_insert_with(|| match kind {
        Kind::Histogram => Series::Histogram {
            counts: [0; BUCKETS.len()],
            sum: 0.0,
            count: 0,
        },
        _ => Series::Value(0.0),
    })
}

/// Adds `by` to a counter.
pub fn counter_add(name: &'static str, help: &'static str, labels: &[(&str, &str)], by: f64) {
    if let Series::Value(v) = series(&mut registry(), name, help, Kind::Counter, labels) {
        *v += by;
    }
}

/// Adds one to a counter.
pub fn counter_inc(name: &'static str, help: &'static str, labels: &[(&str, &str)]) {
    counter_add(name, help, labels, 1.0);
}

/// Sets a gauge.
pub fn gauge_set(name: &'static str, help: &'static str, labels: &[(&str, &str)], value: f64) {
    if let Series::Value(v) = series(&mut registry(), name, help, Kind::Gauge, labels) {
        *v = value;
    }
}

/// Replaces every series of a gauge at once, for gauges computed from a
/// snapshot (machines per MAAS state): states that vanished drop to nothing
/// instead of keeping their last count.
pub fn gauge_replace_all(
    name: &'static str,
    help: &'static str,
    values: &[(Vec<(&str, &str)>, f64)],
) {
    let mut families = registry();
    let family = families.entry(name).or_insert_with(|| Family {
        help,
        kind: Kind::Gauge,
        series: BTreeMap::new(),
    });
    family.series = values
        .iter()
        .map(|(labels, v)| (render_labels(labels), Series::Value(*v)))
        .collect();
}

/// Records one observation (in seconds) in a histogram.
pub fn observe(name: &'static str, help: &'static str, labels: &[(&str, &str)], seconds: f64) {
    if let Series::Histogram { counts, sum, count } =
        series(&mut registry(), name, help, Kind::Histogram, labels)
    {
        for (bucket, bound) in counts.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        *sum += seconds;
        *count += 1;
    }
}

/// The whole registry in the Prometheus text exposition format (0.0.4).
pub fn render() -> String {
    let families = registry();
    let mut out = String::new();
    for (name, family) in families.iter() {
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}", family.help);
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, series) in &family.series {
            match series {
                Series::Value(v) => {
                    let _ = writeln!(out, "{name}{} {}", braces(labels), number(*v));
                }
                Series::Histogram { counts, sum, count } => {
                    let sep = if labels.is_empty() { "" } else { "," };
                    for (bucket, bound) in counts.iter().zip(BUCKETS) {
                        let _ =
                            writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {bucket}");
                    }
                    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
                    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), number(*sum));
                    let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
                }
            }
        }
    }
    out
}

fn render_labels(labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

fn braces(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms() {
        counter_inc(
            "test_metrics_total",
            "a counter",
            &[("controller", "maasmachine")],
        );
        counter_inc(
            "test_metrics_total",
            "a counter",
            &[("controller", "maasmachine")],
        );
        gauge_set("test_metrics_depth", "a gauge", &[("name", "q\"1\"")], 3.0);
        observe("test_metrics_seconds", "a histogram", &[], 0.02);
        observe("test_metrics_seconds", "a histogram", &[], 3.0);
        let text = render();
        assert!(
            text.contains("# TYPE test_metrics_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_total{controller=\"maasmachine\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_depth{name=\"q\\\"1\\\"\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_seconds_bucket{le=\"0.025\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_seconds_bucket{le=\"5\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("test_metrics_seconds_count 2\n"), "{text}");
    }

    #[test]
    fn replace_all_drops_vanished_series() {
        gauge_replace_all(
            "test_metrics_states",
            "g",
            &[
                (vec![("state", "Ready")], 2.0),
                (vec![("state", "Deployed")], 1.0),
            ],
        );
        gauge_replace_all(
            "test_metrics_states",
            "g",
            &[(vec![("state", "Deployed")], 3.0)],
        );
        let text = render();
        assert!(
            !text.contains("test_metrics_states{state=\"Ready\"}"),
            "{text}"
        );
        assert!(
            text.contains("test_metrics_states{state=\"Deployed\"} 3\n"),
            "{text}"
        );
    }
}
