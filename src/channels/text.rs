//! Outbound text shaping: splitting for platform limits and Markdown rendering.
//! (Placeholder implementations; being written.)

/// Splits `text` into chunks of at most `limit` characters.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(limit.max(1))
        .map(|c| c.iter().collect::<String>())
        .filter(|c| !c.trim().is_empty())
        .collect()
}

/// Renders Markdown as Telegram HTML (`parse_mode = HTML`).
pub fn telegram_html(markdown: &str) -> String {
    markdown
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
