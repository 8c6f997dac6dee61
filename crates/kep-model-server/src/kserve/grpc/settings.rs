//! `LogSettings` and `TraceSetting`: the server's one set of settings (`kserve::settings`),
//! read and changed with Triton's gRPC rules. A request with settings changes them; one
//! without reads them. A setting sent without a value clears a trace setting, and is the
//! wrong type for a log setting, as in Triton.

use std::collections::HashMap;

use super::inference::log_settings_request::setting_value::ParameterChoice as Given;
use super::inference::log_settings_response::setting_value::ParameterChoice as Answered;
use super::inference::{
    LogSettingsRequest, LogSettingsResponse, TraceSettingRequest, TraceSettingResponse,
    log_settings_response, trace_setting_response,
};
use crate::kserve::find;
use crate::kserve::settings::{
    self, Change, LoggingChange, Number, Protocol, Scope, TraceChange, TraceSetting,
};
use crate::{Failure, Served};

pub(super) fn log_settings(
    served: &Served,
    r: LogSettingsRequest,
) -> Result<LogSettingsResponse, Failure> {
    let given = |k: &str| r.settings.get(k).map(|v| v.parameter_choice.as_ref());
    let logging = if r.settings.is_empty() {
        served.settings.logging()
    } else {
        if given("log_file").is_some() {
            return Err(settings::log_file_refused());
        }
        let expect = |k: &str, what: &str| Failure::bad_request(format!("expect {what} for '{k}'"));
        let flag = |k: &str| match given(k) {
            None => Ok(None),
            Some(Some(Given::BoolParam(b))) => Ok(Some(*b)),
            Some(_) => Err(expect(k, "boolean")),
        };
        let change = LoggingChange {
            info: flag("log_info")?,
            warning: flag("log_warning")?,
            error: flag("log_error")?,
            verbose_level: match given("log_verbose_level") {
                None => None,
                Some(Some(Given::Uint32Param(n))) => Some(u64::from(*n)),
                Some(_) => return Err(expect("log_verbose_level", "int32")),
            },
            iso8601: match given("log_format") {
                None => None,
                Some(Some(Given::StringParam(f))) => Some(settings::log_format(f, Protocol::Grpc)?),
                Some(_) => return Err(expect("log_format", "string")),
            },
        };
        served.settings.change_logging(change)
    };
    let value = |v: Answered| log_settings_response::SettingValue {
        parameter_choice: Some(v),
    };
    let verbose_level = u32::try_from(logging.verbose_level).unwrap_or(u32::MAX);
    Ok(LogSettingsResponse {
        settings: HashMap::from([
            (
                "log_file".into(),
                value(Answered::StringParam(String::new())),
            ),
            ("log_info".into(), value(Answered::BoolParam(logging.info))),
            (
                "log_warning".into(),
                value(Answered::BoolParam(logging.warning)),
            ),
            (
                "log_error".into(),
                value(Answered::BoolParam(logging.error)),
            ),
            (
                "log_verbose_level".into(),
                value(Answered::Uint32Param(verbose_level)),
            ),
            (
                "log_format".into(),
                value(Answered::StringParam(logging.format().into())),
            ),
        ]),
    })
}

/// The model's settings when the request names it (which must be the served one), else the
/// server's.
pub(super) fn trace_setting(
    served: &Served,
    r: TraceSettingRequest,
) -> Result<TraceSettingResponse, Failure> {
    let scope = if r.model_name.is_empty() {
        Scope::Server
    } else {
        find(served, &r.model_name, None)?;
        Scope::Model
    };
    let setting = if r.settings.is_empty() {
        served.settings.trace(scope)
    } else {
        if r.settings.contains_key("trace_file") {
            return Err(settings::trace_file_refused());
        }
        let mut change = TraceChange::default();
        if let Some(level) = r.settings.get("trace_level") {
            let names: Vec<&str> = level.value.iter().map(String::as_str).collect();
            change.level = if names.is_empty() {
                Change::Clear
            } else {
                settings::level(&names)?.map_or(Change::Keep, Change::Set)
            };
        }
        for number in Number::ALL {
            let Some(given) = r.settings.get(number.name()) else {
                continue;
            };
            match given.value.as_slice() {
                [] => number.clear(&mut change),
                [text] => number.read(text, Protocol::Grpc, &mut change)?,
                _ => {
                    return Err(Failure::bad_request(format!(
                        "expect only 1 value for '{}'",
                        number.name()
                    )));
                }
            }
        }
        served.settings.change_trace(scope, &change)?
    };
    Ok(TraceSettingResponse {
        settings: trace_settings(&setting),
    })
}

fn trace_settings(t: &TraceSetting) -> HashMap<String, trace_setting_response::SettingValue> {
    let value = |v: Vec<String>| trace_setting_response::SettingValue { value: v };
    let mut settings = HashMap::from([
        (
            "trace_level".into(),
            value(t.level.names().into_iter().map(String::from).collect()),
        ),
        ("trace_file".into(), value(vec![TraceSetting::FILE.into()])),
        ("trace_mode".into(), value(vec![TraceSetting::MODE.into()])),
    ]);
    for number in Number::ALL {
        settings.insert(number.name().into(), value(vec![number.of(t)]));
    }
    settings
}
