//! The cost side of every model call a session makes (its steps, compaction, learning): the
//! budget check before the call and the usage recorded after it, in the process's usage
//! ledger ([`crate::usage`]).
//!
//! Over a budget the call is not made: a `budget.exceeded` event goes on the tape and the
//! caller gets [`Exceeded`] (a step tells the chat [`Exceeded::message`]). A call the provider
//! reported no usage for is recorded with Bub's estimate ([`Usage::estimated`]).

use serde_json::{Value, json};

use crate::access::Role;
use crate::llm::{ChatRequest, ChatResponse, LlmClient, LlmError, ModelChain, Usage};
use crate::tape::{Deferred, Event};
use crate::tools::ToolContext;
use crate::usage::{Ask, Entry, Exceeded, Purpose};

/// Whether the call `request` describes may be made in `ctx`'s session: `Err` when it would
/// pass a daily budget (recorded on the tape). A ledger that cannot be read is logged and does
/// not stop the call.
pub(crate) async fn allowed(
    ctx: &ToolContext,
    purpose: Purpose,
    llm: &LlmClient,
    input: u64,
) -> Result<(), Exceeded> {
    let (ledger, session) = (ctx.process.usage.clone(), ctx.billed_session().to_owned());
    if !ledger.has_budgets() {
        return Ok(());
    }
    let model = label(llm);
    let chat_limited = ctx.turn.policy.role == Role::Guest || ledger.limits_owners();
    let checked = ledger.check(Ask {
        session: &session,
        model: &model,
        chat_limited,
        input,
    });
    let exceeded = match checked.await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(exceeded)) => exceeded,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "usage.ledger.error");
            return Ok(());
        }
    };
    let data = json!({
        "budget": exceeded.budget,
        "limit": exceeded.limit,
        "spent": exceeded.spent,
        "for": purpose,
        "resets_in_seconds": exceeded.resets_in.as_secs(),
    });
    tracing::warn!(session = ctx.session_id(), data = %data, "budget.exceeded");
    ctx.tape().event(Event::BudgetExceeded, data).await;
    Err(exceeded)
}

/// Why a call made through [`call`] gave no answer.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Not made: it would pass a budget.
    Budget(Exceeded),
    /// Made, and failed.
    Model(LlmError),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Budget(e) => write!(f, "over the daily budget ({}), not made", e.budget),
            Failed::Model(e) => e.fmt(f),
        }
    }
}

/// A call of a session that is not a step (compaction, learning): checked against the
/// budgets (at the chain's first model's prices), made down the chain (fallbacks recorded),
/// and its usage recorded in the ledger and in a `run` event on the tape, under the model
/// that answered.
pub(crate) async fn call(
    ctx: &ToolContext,
    purpose: Purpose,
    chain: &ModelChain,
    request: &ChatRequest,
) -> Result<ChatResponse, Failed> {
    let input = Usage::estimated(request, &ChatResponse::default()).input;
    allowed(ctx, purpose, chain.primary(), input)
        .await
        .map_err(Failed::Budget)?;
    let answer = chain.chat(request).await;
    super::runner::record_fallbacks(ctx, answer.fallbacks).await;
    let response = answer.result.map_err(Failed::Model)?;
    let usage = record(ctx, purpose, answer.by, request, &response).await;
    ctx.tape()
        .event(Event::Run, run_event(answer.by, &usage, purpose))
        .await;
    Ok(response)
}

/// The usage of a call that answered (the provider's, else Bub's estimate), appended to the
/// ledger; returned for the tape's `run` event ([`run_event`]).
pub(crate) async fn record(
    ctx: &ToolContext,
    purpose: Purpose,
    llm: &LlmClient,
    request: &ChatRequest,
    response: &ChatResponse,
) -> Usage {
    let usage = response
        .usage
        .unwrap_or_else(|| Usage::estimated(request, response));
    crate::metrics::tokens(usage.input, usage.cache_read, usage.output);
    let ledger = ctx.process.usage.clone();
    let entry = Entry::call(
        ledger.today(),
        ctx.billed_session(),
        purpose,
        &label(llm),
        &usage,
    );
    let failed =
        |e: anyhow::Error| tracing::error!(error = %format!("{e:#}"), "usage.ledger.error");
    if ledger.has_budgets() || !ledger.is_blocking() {
        // The next call's budget check counts this one: written before going on.
        ledger.record(entry).await.unwrap_or_else(failed);
    } else {
        // No budget reads it: written with the tape's next operation, saving a hop.
        let chore = move || ledger.record_blocking(&entry).unwrap_or_else(failed);
        ctx.tape().defer(Deferred::Chore(Box::new(chore)));
    }
    usage
}

/// The tape's `run` event of a call that answered with `usage` (`for` names a call that is
/// not a step).
pub(crate) fn run_event(llm: &LlmClient, usage: &Usage, purpose: Purpose) -> Value {
    let mut ran = json!({"status": "ok", "usage": usage.to_record(), "provider": llm.provider(), "model": llm.model()});
    if purpose != Purpose::Step {
        ran["for"] = json!(purpose);
    }
    ran
}

/// `provider:model`, the ledger's and the price table's name of a model.
fn label(llm: &LlmClient) -> String {
    format!("{}:{}", llm.provider(), llm.model())
}
