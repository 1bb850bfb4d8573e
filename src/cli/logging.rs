//! Logging: env_logger (RUST_LOG) with the HTTP client's secret-bearing
//! TRACE records capped away, whatever RUST_LOG asks.

/// Log targets whose TRACE records carry raw HTTP requests, Authorization
/// headers included (the MAAS OAuth signature, Kubernetes bearer tokens).
/// Their DEBUG records list only non-sensitive headers.
const SECRET_BEARING_TARGETS: [&str; 2] = ["ureq", "ureq_proto"];

/// Whether a record may be written at all, whatever RUST_LOG asks:
/// `ureq` and `ureq_proto` are capped at DEBUG.
fn may_log(target: &str, level: log::Level) -> bool {
    level < log::Level::Trace
        || !SECRET_BEARING_TARGETS.iter().any(|crate_name| {
            target
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
}

/// env_logger (RUST_LOG, default info) behind the [`may_log`] cap.
struct CappedLogger(env_logger::Logger);

impl log::Log for CappedLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        may_log(metadata.target(), metadata.level()) && self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if may_log(record.target(), record.level()) {
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// Logging with RUST_LOG, else `default` (`info`, `warn`...).
pub fn init(default: &str) {
    let logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default))
            .build();
    let max_level = logger.filter();
    if log::set_boxed_logger(Box::new(CappedLogger(logger))).is_ok() {
        log::set_max_level(max_level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_client_traces_never_reach_the_log() {
        use log::Level::{Debug, Info, Trace};
        for target in ["ureq", "ureq::run", "ureq_proto", "ureq_proto::util"] {
            assert!(
                !may_log(target, Trace),
                "{target} TRACE carries Authorization"
            );
            assert!(may_log(target, Debug) && may_log(target, Info), "{target}");
        }
        for target in [
            "capmaas::kube::client",
            "rustls::client",
            "ureqx",
            "my_ureq",
        ] {
            assert!(may_log(target, Trace), "{target} is not capped");
        }
        let logger = CappedLogger(env_logger::Builder::new().parse_filters("trace").build());
        let at = |target, level| {
            log::Log::enabled(
                &logger,
                &log::Metadata::builder().target(target).level(level).build(),
            )
        };
        assert!(!at("ureq_proto::util", Trace), "RUST_LOG=trace is capped");
        assert!(at("ureq_proto::util", Debug) && at("capmaas", Trace));
    }
}
