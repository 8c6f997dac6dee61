//! The built-in carrier of CONTRACT §4: it decides by the last four digits of the number,
//! at once (it sends no receipts).

use std::time::Duration;

use crate::carriers::CarrierOutcome;
use crate::carriers::{Outgoing, Submitted};
use crate::kinds::Route;

pub struct Simulator {
    pub delay: Duration,
}

impl Simulator {
    pub async fn submit(&self, o: &Outgoing<'_>) -> Submitted {
        tokio::time::sleep(self.delay).await;
        let number = o.phone_number;
        let last4 = &number[number.len().saturating_sub(4)..];
        Submitted::Final(match last4 {
            "0000" => CarrierOutcome::Failed,
            "0001" => CarrierOutcome::Resendable,
            "0002" if o.route == Route::Rcs => CarrierOutcome::NoRcs,
            _ => CarrierOutcome::Delivered,
        })
    }
}
