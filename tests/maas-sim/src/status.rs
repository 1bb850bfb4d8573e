//! The simulator's own machine status model, written from MAAS's source and
//! not shared with capmaas's client: codes from `NodeStatus`
//! (canonical/maas `src/maascommon/enums/node.py`), labels (`status_name`)
//! from `NODE_STATUS_LABELS` (`src/maascommon/node.py`), and the `status=`
//! filter words from `NODE_STATUS_SHORT_LABEL_CHOICES`
//! (`src/maasserver/enum.py`: the lower-cased enum attribute names).

/// A MAAS node status. The discriminant is MAAS's numeric `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    New = 0,
    Commissioning = 1,
    FailedCommissioning = 2,
    Missing = 3,
    Ready = 4,
    Reserved = 5,
    Deployed = 6,
    Retired = 7,
    Broken = 8,
    Deploying = 9,
    Allocated = 10,
    FailedDeployment = 11,
    Releasing = 12,
    FailedReleasing = 13,
    DiskErasing = 14,
    FailedDiskErasing = 15,
    RescueMode = 16,
    EnteringRescueMode = 17,
    FailedEnteringRescueMode = 18,
    ExitingRescueMode = 19,
    FailedExitingRescueMode = 20,
    Testing = 21,
    FailedTesting = 22,
}

use Status::*;

/// Every status with its label and filter word, in code order.
const TABLE: [(Status, &str, &str); 23] = [
    (New, "New", "new"),
    (Commissioning, "Commissioning", "commissioning"),
    (
        FailedCommissioning,
        "Failed commissioning",
        "failed_commissioning",
    ),
    (Missing, "Missing", "missing"),
    (Ready, "Ready", "ready"),
    (Reserved, "Reserved", "reserved"),
    (Deployed, "Deployed", "deployed"),
    (Retired, "Retired", "retired"),
    (Broken, "Broken", "broken"),
    (Deploying, "Deploying", "deploying"),
    (Allocated, "Allocated", "allocated"),
    (FailedDeployment, "Failed deployment", "failed_deployment"),
    (Releasing, "Releasing", "releasing"),
    (FailedReleasing, "Releasing failed", "failed_releasing"),
    (DiskErasing, "Disk erasing", "disk_erasing"),
    (
        FailedDiskErasing,
        "Failed disk erasing",
        "failed_disk_erasing",
    ),
    (RescueMode, "Rescue mode", "rescue_mode"),
    (
        EnteringRescueMode,
        "Entering rescue mode",
        "entering_rescue_mode",
    ),
    (
        FailedEnteringRescueMode,
        "Failed to enter rescue mode",
        "failed_entering_rescue_mode",
    ),
    (
        ExitingRescueMode,
        "Exiting rescue mode",
        "exiting_rescue_mode",
    ),
    (
        FailedExitingRescueMode,
        "Failed to exit rescue mode",
        "failed_exiting_rescue_mode",
    ),
    (Testing, "Testing", "testing"),
    (FailedTesting, "Failed testing", "failed_testing"),
];

impl Status {
    /// MAAS's numeric `status`.
    pub fn code(self) -> i64 {
        self as i64
    }

    /// MAAS's `status_name` label, e.g. `Releasing failed`.
    pub fn name(self) -> &'static str {
        TABLE[self as usize].1
    }

    /// The word `GET machines/?status=` takes, e.g. `failed_releasing`.
    pub fn filter_word(self) -> &'static str {
        TABLE[self as usize].2
    }

    /// From a `status_name` label (inventory files use them).
    pub fn from_name(name: &str) -> Option<Status> {
        TABLE.iter().find(|t| t.1 == name).map(|t| t.0)
    }

    /// `RELEASABLE_STATUSES` (`src/maasserver/models/node.py`): the
    /// statuses a release starts from. Ready and Releasing are not in it;
    /// the API answers a release in those as a no-op success.
    pub fn releasable(self) -> bool {
        matches!(
            self,
            Allocated
                | Reserved
                | Broken
                | Deploying
                | Deployed
                | FailedDeployment
                | FailedDiskErasing
                | FailedReleasing
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_code_order_and_round_trips() {
        for (i, (status, name, word)) in TABLE.iter().enumerate() {
            assert_eq!(status.code(), i as i64);
            assert_eq!(status.name(), *name);
            assert_eq!(status.filter_word(), *word);
            assert_eq!(Status::from_name(name), Some(*status));
        }
        assert_eq!(Status::from_name("Acquired"), None);
    }
}
