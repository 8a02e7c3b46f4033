//! `env_get`: one environment variable of the provider's process, when the
//! configuration allows it by name (`[bundled.env] allow`, deny by
//! default), and only up to `max_value_bytes` (refused past it, not cut).

use evidence_wire_config::BundledEnvConfig;
use evidence_wire_provider::CheckError;

/// The value of `key`, or why it is not answered.
pub(crate) fn env_get(config: &BundledEnvConfig, key: &str) -> Result<String, CheckError> {
    if !config.allow.iter().any(|allowed| allowed == key) {
        return Err(CheckError::new(
            "env_key_denied",
            format!(
                "reading {key:?} is not allowed; add it to [bundled.env] allow in the configuration"
            ),
        ));
    }
    let value = match std::env::var(key) {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => {
            return Err(CheckError::new(
                "env_not_set",
                format!("environment variable {key:?} is not set"),
            ));
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(CheckError::new(
                "env_not_unicode",
                format!("environment variable {key:?} is not valid UTF-8"),
            ));
        }
    };
    if value.len() > config.max_value_bytes {
        return Err(CheckError::new(
            "env_value_too_large",
            format!(
                "environment variable {key:?} holds {} bytes, more than the {}-byte limit",
                value.len(),
                config.max_value_bytes
            ),
        ));
    }
    Ok(value)
}
