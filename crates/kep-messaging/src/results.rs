//! RCS result groups: the finished results no open group holds, handed out up to 1000 at a
//! time as a group the client completes; a group not completed within its lease goes back
//! to the pool.

use kep_core::secret::random_token;

use crate::Messaging;
use crate::ids::{ClientId, ReportGroupId};
use crate::store::{GroupCompletion, MessageRow};

/// Results per group (CONTRACT §4).
const GROUP_SIZE: i64 = 1000;

impl Messaging {
    /// A new group of the caller's results, and its id; no id when there were none.
    pub async fn hand_out_results(
        &self,
        caller: &ClientId,
    ) -> sqlx::Result<(Option<ReportGroupId>, Vec<MessageRow>)> {
        let group = ReportGroupId::from(random_token(12));
        let lease_ms = i64::try_from(self.settings.results_lease_s)
            .unwrap_or(i64::MAX / 2)
            .saturating_mul(1000);
        let rows = self
            .store
            .hand_out_results(caller, &group, self.clock.unix_ms(), lease_ms, GROUP_SIZE)
            .await?;
        Ok(((!rows.is_empty()).then_some(group), rows))
    }

    /// Retires a group's results for good: they are never handed out again.
    pub async fn complete_results(
        &self,
        caller: &ClientId,
        group: &ReportGroupId,
    ) -> sqlx::Result<GroupCompletion> {
        self.store
            .complete_group(caller, group, self.clock.unix_ms())
            .await
    }
}
