//! Triton's logging and trace settings (its `logging` and `trace` extensions), kept once
//! per server for REST and gRPC alike, with Triton's rules and texts (`http_server.cc`,
//! `grpc_server.cc`, `tracer.cc`). kep writes no trace files and its own log follows
//! `RUST_LOG`, so the settings are kept and answered, not obeyed; and as in a Triton started
//! without a trace file, turning tracing on is refused (`trace file name is not given`).

use std::sync::Mutex;

use crate::Failure;

/// Which protocol a change came by: a few of Triton's texts and codes differ between them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    Rest,
    Grpc,
}

#[derive(Default)]
pub struct Settings {
    logging: Mutex<Logging>,
    trace: Mutex<Traces>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Logging {
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    pub verbose_level: u64,
    pub iso8601: bool,
}

impl Default for Logging {
    fn default() -> Logging {
        Logging {
            info: true,
            warning: true,
            error: true,
            verbose_level: 0,
            iso8601: false,
        }
    }
}

impl Logging {
    pub fn format(&self) -> &'static str {
        if self.iso8601 { "ISO8601" } else { "default" }
    }
}

/// The log settings a request names; the others stay as they are.
#[derive(Default, Debug)]
pub struct LoggingChange {
    pub info: Option<bool>,
    pub warning: Option<bool>,
    pub error: Option<bool>,
    pub verbose_level: Option<u64>,
    pub iso8601: Option<bool>,
}

/// Reads a `log_format`, in the protocol's words when it is neither of Triton's two.
pub fn log_format(format: &str, by: Protocol) -> Result<bool, Failure> {
    match (format, by) {
        ("default", _) => Ok(false),
        ("ISO8601", _) => Ok(true),
        (other, Protocol::Rest) => Err(Failure::unavailable(format!(
            "invalid argument for --log_format, got: {other}"
        ))),
        (other, Protocol::Grpc) => Err(Failure::bad_request(format!(
            "invalid argument for log_format, got: {other}"
        ))),
    }
}

pub fn log_file_refused() -> Failure {
    Failure::not_implemented("log file location can not be updated through network protocol")
}

pub fn trace_file_refused() -> Failure {
    Failure::not_implemented("trace file location can not be updated through network protocol")
}

/// A trace level: `OFF`, or `TIMESTAMPS` and/or `TENSORS`.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct Level {
    timestamps: bool,
    tensors: bool,
}

impl Level {
    pub fn names(self) -> Vec<&'static str> {
        match (self.timestamps, self.tensors) {
            (false, false) => vec!["OFF"],
            (true, false) => vec!["TIMESTAMPS"],
            (false, true) => vec!["TENSORS"],
            (true, true) => vec!["TIMESTAMPS", "TENSORS"],
        }
    }

    fn is_off(self) -> bool {
        self == Level::default()
    }
}

/// Reads a `trace_level` list as Triton does: `OFF` only alone, names it does not know
/// passed over, and none it knows leaving the level as it is.
pub fn level(names: &[&str]) -> Result<Option<Level>, Failure> {
    let mut level = None;
    for &name in names {
        let mut l: Level = level.unwrap_or_default();
        match name {
            "OFF" if names.len() == 1 => {}
            "OFF" => {
                return Err(Failure::bad_request(
                    "Expect only one trace level 'OFF' is specified",
                ));
            }
            "TIMESTAMPS" => l.timestamps = true,
            "TENSORS" => l.tensors = true,
            _ => continue,
        }
        level = Some(l);
    }
    Ok(level)
}

/// One trace setting in a change: kept, cleared (back to what the scope falls back on), or
/// set.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum Change<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T: Copy> Change<T> {
    fn apply(self, field: &mut Option<T>) {
        match self {
            Change::Keep => {}
            Change::Clear => *field = None,
            Change::Set(v) => *field = Some(v),
        }
    }
}

#[derive(Default, Debug)]
pub struct TraceChange {
    pub level: Change<Level>,
    pub rate: Change<u32>,
    pub count: Change<i32>,
    pub log_frequency: Change<u32>,
}

/// The numeric trace settings, by their names.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    Rate,
    Count,
    LogFrequency,
}

impl Number {
    pub const ALL: [Number; 3] = [Number::Rate, Number::Count, Number::LogFrequency];

    pub fn name(self) -> &'static str {
        match self {
            Number::Rate => "trace_rate",
            Number::Count => "trace_count",
            Number::LogFrequency => "log_frequency",
        }
    }

    /// Reads the value as Triton does (`std::stoi`, then the setting's own type) into
    /// `change`, or refuses it in Triton's words.
    pub fn read(self, text: &str, by: Protocol, change: &mut TraceChange) -> Result<(), Failure> {
        let name = self.name();
        let (low, high) = match self {
            Number::Count => (MIN_TRACE_COUNT.to_string(), i32::MAX.to_string()),
            _ => ("0".to_owned(), u32::MAX.to_string()),
        };
        let n = match stoi(text) {
            Ok(n) => n,
            Err(Stoi::Invalid) => {
                return Err(Failure::bad_request(format!(
                    "Unable to parse '{name}', got: {text}"
                )));
            }
            Err(Stoi::OutOfRange) => {
                return Err(Failure::bad_request(format!(
                    "Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}"
                )));
            }
        };
        match self {
            Number::Count if n < MIN_TRACE_COUNT => {
                let space = if by == Protocol::Grpc { " " } else { "" };
                return Err(Failure::bad_request(format!(
                    "Unable to parse '{name}'. Expecting value >= {MIN_TRACE_COUNT}, got:{space}{text}"
                )));
            }
            Number::Count => change.count = Change::Set(n),
            // Triton keeps these unsigned: a negative number wraps, as its cast does.
            Number::Rate => change.rate = Change::Set(n as u32),
            Number::LogFrequency => change.log_frequency = Change::Set(n as u32),
        }
        Ok(())
    }

    pub fn clear(self, change: &mut TraceChange) {
        match self {
            Number::Rate => change.rate = Change::Clear,
            Number::Count => change.count = Change::Clear,
            Number::LogFrequency => change.log_frequency = Change::Clear,
        }
    }

    pub fn of(self, setting: &TraceSetting) -> String {
        match self {
            Number::Rate => setting.rate.to_string(),
            Number::Count => setting.count.to_string(),
            Number::LogFrequency => setting.log_frequency.to_string(),
        }
    }
}

/// Triton's smallest `trace_count`: -1, no limit.
const MIN_TRACE_COUNT: i32 = -1;

enum Stoi {
    Invalid,
    OutOfRange,
}

/// C++'s `std::stoi`: leading white space, a sign, digits, and whatever follows ignored.
fn stoi(text: &str) -> Result<i32, Stoi> {
    let s = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(Stoi::Invalid);
    }
    let magnitude = s[..digits]
        .bytes()
        .try_fold(0i64, |n, d| {
            n.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })
        .ok_or(Stoi::OutOfRange)?;
    let n = if negative { -magnitude } else { magnitude };
    i32::try_from(n).map_err(|_| Stoi::OutOfRange)
}

/// The trace settings in effect for the server or its model.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TraceSetting {
    pub level: Level,
    pub rate: u32,
    pub count: i32,
    pub log_frequency: u32,
}

impl TraceSetting {
    /// Triton's defaults without `--trace-config`.
    const DEFAULT: TraceSetting = TraceSetting {
        level: Level {
            timestamps: false,
            tensors: false,
        },
        rate: 1000,
        count: -1,
        log_frequency: 0,
    };

    /// Always empty: kep writes no trace file.
    pub const FILE: &str = "";
    pub const MODE: &str = "triton";

    /// Triton's check of a new setting: one that traces needs a rate and a file.
    fn check(&self) -> Result<(), Failure> {
        let reason = if self.level.is_off() {
            return Ok(());
        } else if self.rate == 0 {
            "sample rate must be non-zero"
        } else {
            "trace file name is not given"
        };
        Err(Failure::bad_request(format!(
            "Attempting to set invalid trace setting :{reason}"
        )))
    }
}

/// What a scope sets itself; the rest falls back on the server's, then Triton's defaults.
#[derive(Clone, Copy, Default)]
struct Fields {
    level: Option<Level>,
    rate: Option<u32>,
    count: Option<i32>,
    log_frequency: Option<u32>,
}

impl Fields {
    fn over(&self, fallback: TraceSetting) -> TraceSetting {
        TraceSetting {
            level: self.level.unwrap_or(fallback.level),
            rate: self.rate.unwrap_or(fallback.rate),
            count: self.count.unwrap_or(fallback.count),
            log_frequency: self.log_frequency.unwrap_or(fallback.log_frequency),
        }
    }

    fn changed(mut self, change: &TraceChange) -> Fields {
        change.level.apply(&mut self.level);
        change.rate.apply(&mut self.rate);
        change.count.apply(&mut self.count);
        change.log_frequency.apply(&mut self.log_frequency);
        self
    }
}

/// The server's settings and the served model's own.
#[derive(Default)]
struct Traces {
    server: Fields,
    model: Fields,
}

impl Traces {
    fn server(&self) -> TraceSetting {
        self.server.over(TraceSetting::DEFAULT)
    }

    fn model(&self) -> TraceSetting {
        self.model.over(self.server())
    }
}

/// Whose trace settings a call reads or changes: the server's, or the served model's (which
/// fall back on the server's where it sets none).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    Server,
    Model,
}

impl Settings {
    pub fn logging(&self) -> Logging {
        *self.logging.lock().expect("settings lock")
    }

    pub fn change_logging(&self, change: LoggingChange) -> Logging {
        let mut logging = self.logging.lock().expect("settings lock");
        let l = &mut *logging;
        l.info = change.info.unwrap_or(l.info);
        l.warning = change.warning.unwrap_or(l.warning);
        l.error = change.error.unwrap_or(l.error);
        l.verbose_level = change.verbose_level.unwrap_or(l.verbose_level);
        l.iso8601 = change.iso8601.unwrap_or(l.iso8601);
        *l
    }

    pub fn trace(&self, scope: Scope) -> TraceSetting {
        let traces = self.trace.lock().expect("settings lock");
        match scope {
            Scope::Server => traces.server(),
            Scope::Model => traces.model(),
        }
    }

    /// Applies `change` to the scope's settings if the setting in effect then passes
    /// Triton's check; answers the setting in effect.
    pub fn change_trace(
        &self,
        scope: Scope,
        change: &TraceChange,
    ) -> Result<TraceSetting, Failure> {
        let mut traces = self.trace.lock().expect("settings lock");
        let (fields, fallback) = match scope {
            Scope::Server => (&mut traces.server, TraceSetting::DEFAULT),
            Scope::Model => {
                let server = traces.server();
                (&mut traces.model, server)
            }
        };
        let changed = fields.changed(change);
        let setting = changed.over(fallback);
        setting.check()?;
        *fields = changed;
        Ok(setting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(n: u32) -> TraceChange {
        TraceChange {
            rate: Change::Set(n),
            ..TraceChange::default()
        }
    }

    fn message(f: Failure) -> String {
        f.message
    }

    #[test]
    fn a_model_falls_back_on_the_server_where_it_sets_nothing() {
        let s = Settings::default();
        assert_eq!(s.trace(Scope::Model), TraceSetting::DEFAULT);
        s.change_trace(Scope::Model, &rate(10)).unwrap();
        s.change_trace(Scope::Server, &rate(20)).unwrap();
        let count = TraceChange {
            count: Change::Set(5),
            ..TraceChange::default()
        };
        s.change_trace(Scope::Server, &count).unwrap();
        assert_eq!(
            (s.trace(Scope::Model).rate, s.trace(Scope::Model).count),
            (10, 5)
        );
        assert_eq!(s.trace(Scope::Server).rate, 20);
        let clear = TraceChange {
            rate: Change::Clear,
            ..TraceChange::default()
        };
        assert_eq!(s.change_trace(Scope::Model, &clear).unwrap().rate, 20);
        assert_eq!(s.change_trace(Scope::Server, &clear).unwrap().rate, 1000);
        assert_eq!(s.trace(Scope::Model).rate, 1000);
    }

    #[test]
    fn tracing_is_not_turned_on_without_a_file_and_nothing_changes() {
        let s = Settings::default();
        let on = TraceChange {
            level: Change::Set(level(&["TIMESTAMPS"]).unwrap().unwrap()),
            rate: Change::Set(7),
            ..TraceChange::default()
        };
        for scope in [Scope::Server, Scope::Model] {
            let refused = s.change_trace(scope, &on).unwrap_err();
            assert_eq!(
                message(refused),
                "Attempting to set invalid trace setting :trace file name is not given"
            );
        }
        let zero = TraceChange {
            rate: Change::Set(0),
            ..on
        };
        let refused = s.change_trace(Scope::Server, &zero).unwrap_err();
        assert!(message(refused).ends_with(":sample rate must be non-zero"));
        assert_eq!(s.trace(Scope::Model), TraceSetting::DEFAULT);
        // A rate of 0 is a setting while tracing is off, as in Triton.
        assert_eq!(s.change_trace(Scope::Server, &rate(0)).unwrap().rate, 0);
    }

    #[test]
    fn levels_read_as_triton_reads_them() {
        let both = level(&["TENSORS", "x", "TIMESTAMPS"]).unwrap().unwrap();
        assert_eq!(both.names(), ["TIMESTAMPS", "TENSORS"]);
        assert_eq!(level(&["OFF"]).unwrap().unwrap().names(), ["OFF"]);
        assert_eq!(level(&["nope"]).unwrap(), None);
        assert_eq!(level(&[]).unwrap(), None);
        for names in [&["OFF", "TENSORS"][..], &["TENSORS", "OFF"]] {
            let refused = level(names).unwrap_err();
            assert_eq!(
                message(refused),
                "Expect only one trace level 'OFF' is specified"
            );
        }
    }

    #[test]
    fn numbers_read_as_std_stoi_reads_them() {
        let read = |n: Number, text: &str, by| {
            let mut c = TraceChange::default();
            n.read(text, by, &mut c).map(|()| c).map_err(message)
        };
        let got = |r: Result<TraceChange, String>| r.unwrap();
        assert_eq!(
            got(read(Number::Rate, " +12abc", Protocol::Rest)).rate,
            Change::Set(12)
        );
        assert_eq!(
            got(read(Number::Rate, "-1", Protocol::Rest)).rate,
            Change::Set(u32::MAX)
        );
        assert_eq!(
            got(read(Number::Count, "-1", Protocol::Rest)).count,
            Change::Set(-1)
        );
        assert_eq!(
            got(read(Number::LogFrequency, "2147483647", Protocol::Grpc)).log_frequency,
            Change::Set(i32::MAX as u32)
        );
        assert_eq!(
            read(Number::Rate, "x1", Protocol::Rest).unwrap_err(),
            "Unable to parse 'trace_rate', got: x1"
        );
        assert_eq!(
            read(Number::LogFrequency, "2147483648", Protocol::Rest).unwrap_err(),
            "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: 2147483648"
        );
        assert_eq!(
            read(Number::Count, "-99999999999999999999", Protocol::Grpc).unwrap_err(),
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: -99999999999999999999"
        );
        assert_eq!(
            read(Number::Count, "-2", Protocol::Rest).unwrap_err(),
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"
        );
        assert_eq!(
            read(Number::Count, "-2", Protocol::Grpc).unwrap_err(),
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -2"
        );
    }

    #[test]
    fn log_changes_keep_what_they_do_not_name() {
        let s = Settings::default();
        let l = s.change_logging(LoggingChange {
            verbose_level: Some(3),
            iso8601: Some(true),
            ..LoggingChange::default()
        });
        assert_eq!((l.info, l.verbose_level, l.format()), (true, 3, "ISO8601"));
        assert_eq!(s.logging(), l);
        assert!(log_format("xml", Protocol::Rest).is_err());
    }
}
