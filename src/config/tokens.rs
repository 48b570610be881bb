//! The shape of a chat platform's bot token (and webhook secret) and of a model key, checked before any network
//! call: a token pasted wrong (`hello`, a user id, the bot's name) stops Bub at start with the
//! variable named (exit 2) instead of reaching the platform.
//!
//! The checks are loose on purpose — the platforms change their token formats: a Telegram token
//! is digits (the bot's id), `:`, then a rest without whitespace; a Discord token is three
//! non-empty parts joined by dots. Platforms without a rule here (a plugin's) take any token.
//! A webhook secret is Telegram's 1 to 256 of `A-Z a-z 0-9 _ -`. Errors never quote the value.

use super::ConfigError;

/// Checks `token`, the value of `var`, against `platform`'s token shape.
pub(crate) fn check_bot_token(platform: &str, var: &str, token: &str) -> Result<(), ConfigError> {
    let ok = match platform {
        "telegram" => telegram_shape(token),
        "discord" => discord_shape(token),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let expected = match platform {
        "telegram" => "digits, ':', then the rest, e.g. 123456789:AAE… as @BotFather gives it",
        _ => "three parts joined by dots, as the Discord developer portal's Bot page gives it",
    };
    Err(ConfigError::new(
        var,
        format!("does not look like a {platform} bot token (expected {expected}; value not shown)"),
    ))
}

/// Telegram's rule for a webhook secret: 1 to 256 of `A-Z a-z 0-9 _ -`. Never quoted.
pub(super) fn check_webhook_secret(var: &str, secret: &str) -> Result<(), ConfigError> {
    let ok = (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match ok {
        true => Ok(()),
        false => Err(ConfigError::new(
            var,
            "must be 1 to 256 characters of A-Z, a-z, 0-9, _ and -",
        )),
    }
}

/// `123456789:rest`: the bot id's digits, a colon, a non-empty rest without whitespace.
fn telegram_shape(token: &str) -> bool {
    let Some((id, rest)) = token.split_once(':') else {
        return false;
    };
    !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
        && !rest.is_empty()
        && !rest.chars().any(char::is_whitespace)
}

/// `part.part.part`: three non-empty parts without whitespace.
fn discord_shape(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| !p.is_empty())
        && !token.chars().any(char::is_whitespace)
}

/// A model API key as pasted into `bub init`: visible ASCII without spaces (a key is sent in an
/// HTTP header), and for a hosted provider at least 8 characters (what every hosted provider's
/// keys are well beyond; a shorter answer is a mistake, not a key). Never quoted.
pub(crate) fn check_api_key(var: &str, key: &str, hosted: bool) -> Result<(), ConfigError> {
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::new(
            var,
            "a key is letters, digits and punctuation without spaces (value not shown)",
        ));
    }
    if hosted && key.len() < 8 {
        return Err(ConfigError::new(
            var,
            "too short for a key (value not shown): paste the whole key",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_tokens_are_digits_colon_rest() {
        for good in [
            "123456789:AAFakeSecretTokenForTests_abcdefghijk",
            "1:x",
            "123:abc-DEF_ghi",
        ] {
            assert!(check_bot_token("telegram", "T", good).is_ok(), "{good}");
        }
        for bad in ["hello", ":abc", "12a:abc", "123:", "123:ab cd", "abc:123"] {
            let err = check_bot_token("telegram", "BUB_TELEGRAM_TOKEN", bad).unwrap_err();
            assert_eq!(err.var, "BUB_TELEGRAM_TOKEN");
            assert!(!err.message.contains(bad), "{err}");
        }
    }

    #[test]
    fn discord_tokens_are_three_dotted_parts() {
        for good in ["MTIz.GaBcDe.xyz-_123", "a.b.c"] {
            assert!(check_bot_token("discord", "D", good).is_ok(), "{good}");
        }
        for bad in ["hello", "a.b", "a..c", "a.b.c.d", ".b.c", "a.b. c"] {
            let err = check_bot_token("discord", "BUB_DISCORD_TOKEN", bad).unwrap_err();
            assert!(err.message.contains("discord bot token"), "{err}");
        }
        // A platform without a rule takes any token.
        assert!(check_bot_token("matrix", "M", "anything").is_ok());
    }

    #[test]
    fn keys_are_visible_ascii_and_hosted_ones_not_tiny() {
        assert!(check_api_key("K", "sk-or-v1-0123456789", true).is_ok());
        assert!(check_api_key("K", "local", false).is_ok());
        assert!(check_api_key("K", "short", true).is_err());
        let err = check_api_key("K", "sk-ünïcode-key", true).unwrap_err();
        assert!(!err.message.contains("sk-"), "{err}");
    }
}
