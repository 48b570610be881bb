//! What model calls cost and how much of them a day may use: the `[prices]` table of the
//! configuration file and the `BUB_BUDGET_*` variables, validated at load.
//!
//! Prices are USD per million tokens, per `provider:model`; there is no built-in price list
//! (it would go stale): a model without a price shows tokens only.

use std::collections::BTreeMap;

use super::ConfigError;

/// USD per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input not served from the cache.
    pub input: f64,
    /// Input read from the provider's cache (default: `input`).
    pub cached_input: f64,
    /// Input written to the provider's cache (default: `input`).
    pub cache_write: f64,
    pub output: f64,
}

impl Price {
    /// The USD cost of `usage` at this price.
    pub fn cost(&self, usage: &crate::llm::Usage) -> f64 {
        let fresh = usage
            .input
            .saturating_sub(usage.cache_read)
            .saturating_sub(usage.cache_write);
        (fresh as f64 * self.input
            + usage.cache_read as f64 * self.cached_input
            + usage.cache_write as f64 * self.cache_write
            + usage.output as f64 * self.output)
            / 1_000_000.0
    }

    /// Each field the larger of the two.
    fn max(self, other: Price) -> Price {
        Price {
            input: self.input.max(other.input),
            cached_input: self.cached_input.max(other.cached_input),
            cache_write: self.cache_write.max(other.cache_write),
            output: self.output.max(other.output),
        }
    }
}

/// The `[prices]` table: `provider:model` → [`Price`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

impl Prices {
    /// The price of `model` (`provider:model`), if the table has one.
    pub fn of(&self, model: &str) -> Option<&Price> {
        self.0.get(model)
    }

    /// What a daily USD budget counts for a call of `model`: its price, or — for a model the
    /// table does not price — the highest price of each kind in the table, so a budget still
    /// holds (`None` when the table is empty).
    pub(crate) fn for_budget(&self, model: &str) -> Option<Price> {
        self.of(model)
            .copied()
            .or_else(|| self.0.values().copied().reduce(Price::max))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// From the file's tables (`key` → field → number). Every error names `prices."key".field`.
    pub(crate) fn parse(
        tables: impl IntoIterator<Item = (String, Vec<(String, Option<f64>)>)>,
    ) -> Result<Self, ConfigError> {
        let mut prices = BTreeMap::new();
        for (key, fields) in tables {
            let var = |field: &str| match field {
                "" => format!("prices.{key:?}"),
                field => format!("prices.{key:?}.{field}"),
            };
            let Some((provider, id)) = key.split_once(':') else {
                return Err(ConfigError::new(
                    var(""),
                    "expected a provider:model key, e.g. [prices.\"openai:gpt-4o-mini\"]",
                ));
            };
            if provider.trim().is_empty() || id.trim().is_empty() {
                return Err(ConfigError::new(
                    var(""),
                    "provider and model must both be non-empty",
                ));
            }
            let mut values: BTreeMap<&str, f64> = BTreeMap::new();
            for (field, value) in &fields {
                let name = match field.as_str() {
                    "input" | "cached_input" | "cache_write" | "output" => field.as_str(),
                    _ => {
                        return Err(ConfigError::new(
                            var(field),
                            "unknown field (known: input, cached_input, cache_write, output)",
                        ));
                    }
                };
                match value {
                    Some(v) if v.is_finite() && *v >= 0.0 => values.insert(name, *v),
                    _ => {
                        return Err(ConfigError::new(
                            var(field),
                            "expected a number ≥ 0 (USD per million tokens)",
                        ));
                    }
                };
            }
            let required = |field: &str| {
                values
                    .get(field)
                    .copied()
                    .ok_or_else(|| ConfigError::new(var(field), "missing (USD per million tokens)"))
            };
            let (input, output) = (required("input")?, required("output")?);
            let price = Price {
                input,
                cached_input: values.get("cached_input").copied().unwrap_or(input),
                cache_write: values.get("cache_write").copied().unwrap_or(input),
                output,
            };
            prices.insert(key, price);
        }
        Ok(Self(prices))
    }
}

/// `BUB_BUDGET_*`: how much a day may use (`None`: no limit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budgets {
    /// `BUB_BUDGET_DAILY_TOKENS`: the tokens (input and output) of every call of the day.
    pub daily_tokens: Option<u64>,
    /// `BUB_BUDGET_DAILY_USD`: the cost of every call of the day (needs `[prices]`).
    pub daily_usd: Option<f64>,
    /// `BUB_BUDGET_CHAT_DAILY_TOKENS`: the tokens of one chat's calls of the day, for guests'
    /// turns (and owners' with `owners`).
    pub chat_daily_tokens: Option<u64>,
    /// `BUB_BUDGET_OWNERS` (default false): the chat budget applies to owners' turns too.
    pub owners: bool,
}

impl Budgets {
    /// Whether any budget is set.
    pub fn any(&self) -> bool {
        self.daily_tokens.is_some() || self.daily_usd.is_some() || self.chat_daily_tokens.is_some()
    }
}

/// A budget in tokens: a whole number ≥ 1.
pub(crate) fn parse_tokens(var: &str, raw: &str) -> Result<u64, ConfigError> {
    match raw.trim().parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(ConfigError::new(
            var,
            format!("expected a number of tokens ≥ 1, got {:?}", raw.trim()),
        )),
    }
}

/// A budget in USD: a number > 0.
pub(crate) fn parse_usd(var: &str, raw: &str) -> Result<f64, ConfigError> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ConfigError::new(
            var,
            format!("expected an amount in USD > 0, got {:?}", raw.trim()),
        )),
    }
}
