//! `[[messaging.carriers]]` (CONTRACT §4 "Carriers"): one table per carrier, tried in order.

use kep_smpp::{BindMode, DataCoding, LongText};
use serde::{Deserialize, Serialize};

use crate::kinds::MessageType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CarrierKind {
    Simulator,
    Smpp,
    Http,
}

impl CarrierKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CarrierKind::Simulator => "simulator",
            CarrierKind::Smpp => "smpp",
            CarrierKind::Http => "http",
        }
    }
}

/// One carrier. The fields of the other kinds are ignored; those a kind needs are checked
/// when the service starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarrierSettings {
    pub name: String,
    pub kind: CarrierKind,
    /// The message types it takes (`SM`, `LM`, …); empty: every type its kind carries (an
    /// SMPP or HTTP carrier carries no RCS).
    #[serde(default)]
    pub types: Vec<String>,
    /// The numbers it takes, by their start; empty: any.
    #[serde(default)]
    pub prefixes: Vec<String>,

    // SMPP 3.4.
    pub host: Option<String>,
    pub port: Option<u16>,
    pub system_id: Option<String>,
    /// The SMPP bind's password, or the HTTP gateway's.
    pub password: Option<String>,
    #[serde(default)]
    pub system_type: String,
    #[serde(default)]
    pub bind: BindMode,
    /// The sessions it opens; submits go to them in turn.
    #[serde(default = "default_binds")]
    pub binds: usize,
    /// Each bind's submit_sm awaiting their response at once.
    #[serde(default = "default_window")]
    pub window: usize,
    #[serde(default = "default_enquire_link_s")]
    pub enquire_link_s: u64,
    /// `submit_sm` a second at most; 0: no limit.
    #[serde(default)]
    pub max_rate_per_s: u32,
    /// The source address of a message that has no sender number.
    #[serde(default)]
    pub source_addr: String,
    #[serde(default)]
    pub data_coding: DataCoding,
    #[serde(default)]
    pub long_text: LongText,

    // HTTP (Jasmin's `/send`).
    pub url: Option<String>,
    pub username: Option<String>,
}

fn default_binds() -> usize {
    1
}

fn default_window() -> usize {
    64
}

fn default_enquire_link_s() -> u64 {
    30
}

impl CarrierSettings {
    /// Its `types`, parsed; an RCS type for a kind that carries no RCS is an error.
    pub fn types(&self) -> anyhow::Result<Vec<MessageType>> {
        self.types
            .iter()
            .map(|t| {
                let ty = MessageType::parse(t).ok_or_else(|| {
                    anyhow::anyhow!(
                        "messaging.carriers {:?}: {t:?} is no message type",
                        self.name
                    )
                })?;
                if ty.is_rcs() && self.kind != CarrierKind::Simulator {
                    anyhow::bail!(
                        "messaging.carriers {:?}: a {} carrier carries no RCS ({t})",
                        self.name,
                        self.kind.as_str()
                    );
                }
                Ok(ty)
            })
            .collect()
    }

    /// A count that must be at least 1.
    pub fn at_least_one(&self, field: &str, value: usize) -> anyhow::Result<()> {
        if value == 0 {
            anyhow::bail!(
                "messaging.carriers {:?}: `{field}` must be at least 1",
                self.name
            );
        }
        Ok(())
    }

    /// A field its kind needs.
    pub fn required<'a>(&self, field: &str, value: Option<&'a str>) -> anyhow::Result<&'a str> {
        value.filter(|v| !v.is_empty()).ok_or_else(|| {
            anyhow::anyhow!(
                "messaging.carriers {:?}: a {} carrier needs `{field}`",
                self.name,
                self.kind.as_str()
            )
        })
    }
}
