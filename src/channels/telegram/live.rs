//! Live answers on Telegram (`BUB_STREAM=edits`): the message that shows a running turn's
//! answer is edited with `editMessageText` — HTML, plain text when Telegram rejects the
//! entities, 429s waited out like every send. The same text again is not an error.

use teloxide::prelude::*;
use teloxide::types::{MessageId, ParseMode, Recipient};

use super::Telegram;
use crate::channels::text;

impl Telegram {
    /// Replaces the text of message `id` in `to` with `chunk` (at most one message long).
    pub(super) async fn edit_live(
        &self,
        to: &Recipient,
        id: MessageId,
        chunk: &str,
    ) -> Result<(), String> {
        let html = text::telegram_html(chunk);
        self.send_retrying(to, !html.trim().is_empty(), |formatted| {
            let request = self.bot.edit_message_text(to.clone(), id, "");
            let request = match formatted {
                true => request.text(html.as_str()).parse_mode(ParseMode::Html),
                false => request.text(chunk),
            };
            request.send()
        })
        .await
        .map(drop)
    }
}
