//! Layered settings: command-line flags, then `KEP_*` variables, then an optional TOML
//! file, then the defaults compiled in (CONTRACT §0).
//!
//! A variable `KEP_<SECTION>_<NAME>` sets `<name>` in `[<section>]` when `<section>` is one
//! of the sections the caller names (`KEP_LIVE_ADDR` → `live.addr`); any other `KEP_<NAME>`
//! sets the top-level `<name>` (`KEP_DATA_DIR` → `data_dir`).

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format as _, Serialized, Toml};
use figment::value::Value;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One flag's value, already named by its key path (`live.addr`).
pub type Override = (String, Value);

/// Which variables `KEP_<SECTION>_<NAME>` reach, and variables with names of their own
/// (`("SIMULATOR_DELAY_MS", "messaging.simulator_delay_ms")`).
#[derive(Clone, Copy)]
pub struct EnvNames {
    pub sections: &'static [&'static str],
    pub aliases: &'static [(&'static str, &'static str)],
}

/// Loads `T` from its defaults, the TOML file, the environment and the flag overrides.
pub fn load<T>(
    config_file: Option<&Path>,
    env: EnvNames,
    overrides: Vec<Override>,
) -> Result<T, Box<figment::Error>>
where
    T: Serialize + DeserializeOwned + Default,
{
    let mut figment = Figment::from(Serialized::defaults(T::default()));
    if let Some(path) = config_file {
        if !path.exists() {
            return Err(Box::new(figment::Error::from(format!(
                "config file {} does not exist",
                path.display()
            ))));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment = figment.merge(env_provider(env));
    for (key, value) in overrides {
        figment = figment.merge(Serialized::global(&key, value));
    }
    figment.extract().map_err(Box::new)
}

fn env_provider(env: EnvNames) -> Env {
    Env::prefixed("KEP_").map(move |key| {
        let lower = key.as_str().to_ascii_lowercase();
        if let Some((_, path)) = env
            .aliases
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(&lower))
        {
            return (*path).into();
        }
        match env.sections.iter().find(|s| {
            lower
                .strip_prefix(**s)
                .is_some_and(|rest| rest.starts_with('_'))
        }) {
            Some(section) => format!("{section}.{}", &lower[section.len() + 1..]).into(),
            None => lower.into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    const ENV: EnvNames = EnvNames {
        sections: &["live"],
        aliases: &[("TTL", "live.token_ttl_s")],
    };

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Top {
        data_dir: String,
        live: Section,
    }
    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Section {
        addr: String,
        token_ttl_s: u64,
    }
    impl Default for Top {
        fn default() -> Self {
            Top {
                data_dir: "./kep-data".into(),
                live: Section::default(),
            }
        }
    }
    impl Default for Section {
        fn default() -> Self {
            Section {
                addr: "127.0.0.1:8801".into(),
                token_ttl_s: 3600,
            }
        }
    }

    #[test]
    #[expect(
        clippy::result_large_err,
        reason = "figment::Jail fixes the closure's error type"
    )]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "kep.toml",
                "data_dir = \"/from/toml\"\n[live]\ntoken_ttl_s = 10\naddr = \"127.0.0.1:1\"\n",
            )?;
            jail.set_env("KEP_LIVE_ADDR", "127.0.0.1:2");
            let top: Top = load(Some(Path::new("kep.toml")), ENV, vec![]).unwrap();
            assert_eq!(top.data_dir, "/from/toml");
            assert_eq!(top.live.token_ttl_s, 10);
            assert_eq!(
                top.live.addr, "127.0.0.1:2",
                "the environment beats the file"
            );

            let top: Top = load(
                Some(Path::new("kep.toml")),
                ENV,
                vec![("live.addr".into(), Value::from("127.0.0.1:3"))],
            )
            .unwrap();
            assert_eq!(top.live.addr, "127.0.0.1:3", "a flag beats the environment");

            jail.set_env("KEP_DATA_DIR", "/from/env");
            let top: Top = load(None, ENV, vec![]).unwrap();
            assert_eq!(top.data_dir, "/from/env");
            assert_eq!(top.live.token_ttl_s, 3600, "defaults fill the rest");

            jail.set_env("KEP_TTL", "7");
            let top: Top = load(None, ENV, vec![]).unwrap();
            assert_eq!(top.live.token_ttl_s, 7, "an alias names its own key");
            Ok(())
        });
    }

    #[test]
    fn a_missing_config_file_is_an_error() {
        let err = load::<Top>(Some(Path::new("/nonexistent/kep.toml")), ENV, vec![]);
        assert!(err.is_err());
    }
}
