//! Outbound text shaping for chat platforms.
//!
//! Answers are Markdown-ish text. Before delivery an adapter cuts them to the platform's message
//! size with [`split`] (Telegram 4096, Discord 2000) and, for Telegram, renders each chunk with
//! [`telegram_html`] for `parse_mode = HTML`.
//!
//! Invariants of [`split`]:
//! - every chunk has at most `limit` characters (Unicode scalar values; a `limit` of 0 counts
//!   as 1) and none is empty or whitespace-only;
//! - a text that fits comes back as one chunk, unchanged apart from trailing whitespace;
//! - each chunk is a slice of the input, in order, and only whitespace at cut points is dropped.
//!   The only added text is fence lines: when a cut falls inside a ```` ``` ```` / `~~~` code
//!   fence, the chunk gets a closing fence line and the next chunk starts with the opening line
//!   again, so every chunk has balanced fences. Both added lines count toward `limit`;
//! - a cut goes at the last paragraph break (blank line, fence boundary) in the second half of
//!   the window, else the last line break there, else the last space there, else the latest of
//!   any of those; inside a word only when there is none (a word longer than the window). Cuts
//!   never fall inside a fence line, right after an opening fence or right before its closing
//!   one. A hard cut never splits a UTF-8 char and avoids separating combining marks, joiners,
//!   variation selectors and skin tones from their base;
//! - degenerate limits do not panic or loop: if a fence's opening and closing lines plus 8
//!   characters do not fit in `limit`, that fence is cut like plain text (unbalanced).
//!
//! [`markdown`] is how every renderer of chat text reads it, [`link_href`] which links it keeps,
//! [`escape_into`] how it escapes: for Telegram here, and for the web console
//! (`console::markdown`).
//!
//! Invariants of [`telegram_html`]: the output uses only `b i s code pre a blockquote` (`<pre>` may
//! contain one `<code class="language-…">`), every tag is closed and properly nested, `a`, `pre`,
//! `code` and `blockquote` do not nest in themselves, code holds no other tags, `&`/`<`/`>`
//! are escaped in text and `"` in attributes too, and raw HTML in the input is shown as text.

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag};

#[cfg(test)]
mod tests;

/// Fence lines plus at least this many characters of content must fit in the limit for a
/// fence to be closed and reopened at a cut.
const MIN_FENCED_BODY: usize = 8;

/// `text` cut to `limit` characters, the last one an ellipsis when it was longer (a live
/// answer's message shows the start of what does not fit yet).
pub(crate) fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit.saturating_sub(1)) {
        Some((at, _)) if text[at..].chars().nth(1).is_some() => format!("{}…", &text[..at]),
        _ => text.to_owned(),
    }
}

/// `text` from a platform (a username, a display name) as it may appear inside a Markdown-ish
/// text Bub sends: one line — control characters, line and paragraph separators and bidi
/// controls become spaces —, at most `limit` characters (an ellipsis when cut), and every ASCII
/// punctuation character escaped with a backslash, so it renders as itself on Telegram and
/// Discord and can start no formatting, link, mention or code span, nor a line of its own.
pub(crate) fn literal(text: &str, limit: usize) -> String {
    let breaks = |c: char| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    let line: String = text
        .chars()
        .map(|c| if breaks(c) { ' ' } else { c })
        .collect();
    let mut out = String::with_capacity(line.len());
    for c in cut(line.trim(), limit).chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits `text` into chunks of at most `limit` characters (Unicode scalar values, not bytes).
pub(crate) fn split(text: &str, limit: usize) -> Vec<String> {
    let doc = Doc::parse(text, limit.max(1));
    plan(&doc).iter().map(|piece| doc.render(piece)).collect()
}

/// One chunk: an optional reopened fence (opener line index), a slice of the input and an
/// optional closing fence (opener line index).
#[derive(Clone, Debug, PartialEq)]
struct Piece {
    reopen: Option<usize>,
    range: std::ops::Range<usize>,
    close: Option<usize>,
}

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    Plain,
    Open,
    Close,
}

struct Line {
    start: usize,
    end: usize,
    mark: Mark,
    /// The repairable fence this line is inside of (opener line index), before and after it.
    before: Option<usize>,
    after: Option<usize>,
    /// For an opener line: its char count and the closing line we would add.
    open_len: usize,
    closer: String,
}

struct Doc<'a> {
    text: &'a str,
    limit: usize,
    lines: Vec<Line>,
}

/// Fence marker of a line: (indent bytes, fence char, run length, rest after the run).
fn fence_run(line: &str) -> Option<(usize, char, usize, &str)> {
    let line = line.trim_end();
    let body = line.trim_start_matches([' ', '\t']);
    let ch = body.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let run = body.chars().take_while(|&c| c == ch).count();
    (run >= 3).then(|| (line.len() - body.len(), ch, run, body[run..].trim()))
}

impl<'a> Doc<'a> {
    fn parse(text: &'a str, limit: usize) -> Self {
        let mut lines = Vec::new();
        let mut open: Option<(usize, char, usize)> = None; // (opener line index, char, run)
        let mut start = 0;
        for (idx, raw) in text.split('\n').enumerate() {
            let end = start + raw.len();
            let marker = fence_run(raw);
            let mut line = Line {
                start,
                end,
                mark: Mark::Plain,
                before: None,
                after: None,
                open_len: 0,
                closer: String::new(),
            };
            match (open, marker) {
                (None, Some((indent, ch, run, rest))) if ch == '~' || !rest.contains('`') => {
                    line.mark = Mark::Open;
                    line.open_len = raw.trim_end().chars().count();
                    line.closer = format!("{}{}", &raw[..indent], ch.to_string().repeat(run));
                    open = Some((idx, ch, run));
                }
                (Some((_, och, orun)), Some((_, ch, run, rest)))
                    if ch == och && run >= orun && rest.is_empty() =>
                {
                    line.mark = Mark::Close;
                    open = None;
                }
                _ => {}
            }
            line.before = lines.last().and_then(|l: &Line| l.after);
            line.after = open.map(|(o, ..)| o);
            lines.push(line);
            start = end + 1;
        }
        // Forget fences too big to close and reopen within the limit.
        let repairable: Vec<bool> = lines
            .iter()
            .map(|l| {
                l.mark == Mark::Open
                    && l.open_len + l.closer.chars().count() + 2 + MIN_FENCED_BODY <= limit
            })
            .collect();
        for line in &mut lines {
            line.before = line.before.filter(|&o| repairable[o]);
            line.after = line.after.filter(|&o| repairable[o]);
        }
        Doc { text, limit, lines }
    }

    fn line_at(&self, pos: usize) -> usize {
        self.lines.partition_point(|l| l.start <= pos) - 1
    }

    fn opener(&self, o: usize) -> &'a str {
        self.text[self.lines[o].start..self.lines[o].end].trim_end()
    }

    /// Characters a fence state adds at the end of a chunk (newline plus closing line).
    fn close_cost(&self, state: Option<usize>) -> usize {
        state.map_or(0, |o| 1 + self.lines[o].closer.chars().count())
    }

    fn render(&self, piece: &Piece) -> String {
        let mut out = String::new();
        if let Some(o) = piece.reopen {
            out.push_str(self.opener(o));
            out.push('\n');
        }
        out.push_str(&self.text[piece.range.clone()]);
        if let Some(o) = piece.close {
            out.push('\n');
            out.push_str(&self.lines[o].closer);
        }
        out
    }

    /// Where the next chunk starts after a cut at `pos`: whitespace is skipped, but the
    /// indentation of the line the content resumes on is kept.
    fn resume(&self, pos: usize) -> usize {
        let rest = &self.text[pos..];
        let ws = &rest[..rest.len() - rest.trim_start().len()];
        pos + ws.rfind('\n').map_or(ws.len(), |nl| nl + 1)
    }
}

/// Combining marks, joiners, variation selectors and skin tones: hard cuts avoid starting a
/// chunk with one (unless a whole window of them leaves no other choice).
fn is_joiner(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036F}' | '\u{1AB0}'..='\u{1AFF}' | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}' | '\u{200C}' | '\u{200D}' | '\u{FE00}'..='\u{FE0F}'
        | '\u{FE20}'..='\u{FE2F}' | '\u{1F3FB}'..='\u{1F3FF}' | '\u{E0020}'..='\u{E007F}'
        | '\u{E0100}'..='\u{E01EF}')
}

/// A possible cut: byte position, kept characters (before trailing whitespace), fence state.
#[derive(Clone, Copy)]
struct Cut {
    at: usize,
    len: usize,
    state: Option<usize>,
}

fn plan(doc: &Doc) -> Vec<Piece> {
    let (text, limit) = (doc.text, doc.limit);
    let end = text.trim_end().len();
    let mut pieces = Vec::new();
    let mut pos = 0;
    while pos < end {
        let line0 = doc.line_at(pos);
        let reopen = doc.lines[line0].before;
        let prefix = reopen.map_or(0, |o| doc.lines[o].open_len + 1);
        let rest = &text[pos..end];
        if rest.chars().nth(limit - prefix).is_none() {
            pieces.push(Piece {
                reopen,
                range: pos..end,
                close: None,
            });
            break;
        }
        let budget = limit - prefix;
        // Best cut per score: 0 hard cut (grapheme-safe), 1 word, 2 line, 3 paragraph, 4 any.
        let mut best: [Option<Cut>; 5] = [None; 5];
        let (mut count, mut solid) = (0, 0);
        let mut li = line0;
        let mut line_has_text = !text[doc.lines[li].start..pos].trim().is_empty();
        let mut prev = None;
        for (off, c) in rest.char_indices() {
            let at = pos + off;
            let line = &doc.lines[li];
            if solid > 0 {
                let mut offer = |score: usize, state: Option<usize>| {
                    if prefix + solid + doc.close_cost(state) <= limit {
                        best[score] = Some(Cut {
                            at,
                            len: solid,
                            state,
                        });
                    }
                };
                let in_marker = line.mark != Mark::Plain && (line.before.or(line.after)).is_some();
                if !in_marker {
                    offer(4, line.before);
                    if !is_joiner(c) && prev != Some('\u{200D}') {
                        offer(0, line.before);
                    }
                }
                if c == '\n' && line.mark != Mark::Open {
                    let next = doc.lines.get(li + 1);
                    let into_closer = next.is_some_and(|n| n.mark == Mark::Close);
                    if line.after.is_none() || !into_closer {
                        let para = line.mark == Mark::Close
                            || next.is_none_or(|n| {
                                n.mark == Mark::Open || text[n.start..n.end].trim().is_empty()
                            });
                        offer(if para { 3 } else { 2 }, line.after);
                    }
                } else if c.is_whitespace()
                    && line.mark == Mark::Plain
                    && line_has_text
                    && !prev.is_some_and(char::is_whitespace)
                {
                    let next = text[at..].trim_start_matches([' ', '\t', '\u{a0}']);
                    let breaks = next.is_empty() || next.starts_with(['\r', '\n']);
                    if !breaks && !next.starts_with("```") && !next.starts_with("~~~") {
                        offer(1, line.before);
                    }
                }
            }
            count += 1;
            if c == '\n' {
                li += 1;
                line_has_text = false;
            } else if !c.is_whitespace() {
                line_has_text = true;
                solid = count;
                if solid > budget {
                    break;
                }
            }
            prev = Some(c);
        }
        let half = budget / 2;
        let pick = [3, 2, 1]
            .iter()
            .find_map(|&s| best[s].filter(|cut| cut.len >= half))
            .or_else(|| {
                best[1..4]
                    .iter()
                    .flatten()
                    .max_by_key(|cut| cut.len)
                    .copied()
            })
            .or(best[0])
            .or(best[4]);
        match pick {
            Some(cut) => {
                let kept = text[pos..cut.at].trim_end().len();
                pieces.push(Piece {
                    reopen,
                    range: pos..pos + kept,
                    close: cut.state,
                });
                pos = doc.resume(cut.at);
            }
            // Only whitespace longer than the window before the next text: drop it.
            None if rest.starts_with(char::is_whitespace) => {
                pos += rest.len() - rest.trim_start().len();
            }
            // Unreachable by construction; cut plain text so we always make progress.
            None => {
                let take: usize = rest.chars().take(limit).map(char::len_utf8).sum();
                let kept = rest[..take].trim_end().len();
                pieces.push(Piece {
                    reopen: None,
                    range: pos..pos + kept,
                    close: None,
                });
                pos = doc.resume(pos + take);
            }
        }
    }
    pieces
}

/// The Markdown every renderer of chat text reads (Telegram's HTML, the console's): CommonMark
/// with strikethrough, tables and task lists. Raw HTML in it arrives as `Html`/`InlineHtml`
/// events, which each renderer shows as text.
pub(crate) fn markdown(text: &str) -> Parser<'_> {
    let options =
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    Parser::new_ext(text, options)
}

/// The `href` of a Markdown link to `url` (an autolinked e-mail address as `mailto:`), when its
/// scheme is one of `schemes` (lower case, with their `:` or `://`, compared ignoring case);
/// `None` otherwise — the renderer shows the link as text.
pub(crate) fn link_href(url: &str, email: bool, schemes: &[&str]) -> Option<String> {
    let href = if email {
        format!("mailto:{url}")
    } else {
        url.to_string()
    };
    let lower = href.to_ascii_lowercase();
    schemes.iter().any(|s| lower.starts_with(s)).then_some(href)
}

/// The schemes a Telegram link may have.
const TELEGRAM_SCHEMES: [&str; 5] = ["http://", "https://", "tg://", "mailto:", "ftp://"];

/// Renders Markdown as Telegram HTML (`parse_mode = HTML`).
pub(crate) fn telegram_html(markdown_text: &str) -> String {
    let mut html = Html::default();
    for event in markdown(markdown_text) {
        html.event(event);
    }
    html.finish()
}

/// The language a fenced code block names (its info string's first word), kept to the
/// characters a class name needs (`rust`, `c++`, `objective-c`); empty when none.
pub(crate) fn code_language(kind: &CodeBlockKind) -> String {
    match kind {
        CodeBlockKind::Fenced(info) => info
            .split_whitespace()
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| c.is_alphanumeric() || "+-_#.".contains(*c))
            .collect(),
        CodeBlockKind::Indented => String::new(),
    }
}

/// Appends `text` to `out` with `&`, `<` and `>` escaped, and `"` too in an `attribute`.
pub(crate) fn escape_into(out: &mut String, text: &str, attribute: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// What follows an element once it ends.
#[derive(Clone, Copy, PartialEq)]
enum After {
    Nothing,
    Line,
    Block,
}

/// An open Markdown element and the tag (if any) we emitted for it.
struct Frame {
    /// `out` length before and after the opening tag (equal when no tag was written).
    start: usize,
    mark: usize,
    close: &'static str,
    /// Text to show when a link or image has no text of its own.
    fallback: Option<String>,
    after: After,
    list: bool,
}

#[derive(Default)]
struct Html {
    out: String,
    /// Newlines owed before the next visible output.
    pending: usize,
    frames: Vec<Frame>,
    /// Next number of each open list (`None` for bullets).
    lists: Vec<Option<u64>>,
    /// Raw text of the code or HTML block being read, with its opening and closing tags.
    verbatim: Option<(String, &'static str, String)>,
    cells: usize,
}

impl Html {
    fn inside(&self, close: &str) -> bool {
        self.frames.iter().any(|f| f.close == close)
    }

    fn want(&mut self, newlines: usize) {
        self.pending = self.pending.max(newlines);
    }

    fn block_sep(&self) -> usize {
        if self.lists.is_empty() { 2 } else { 1 }
    }

    /// Writes the owed newlines (counting those already at the end of the output).
    fn flush(&mut self) {
        if !self.out.is_empty() {
            let have = self.out.len() - self.out.trim_end_matches('\n').len();
            for _ in have..self.pending {
                self.out.push('\n');
            }
        }
        self.pending = 0;
    }

    fn text(&mut self, text: &str) {
        if let Some((_, _, buf)) = &mut self.verbatim {
            buf.push_str(text);
        } else {
            self.flush();
            escape_into(&mut self.out, text, false);
        }
    }

    fn push(&mut self, open: &str, close: &'static str, after: After) {
        if !open.is_empty() {
            self.flush();
        }
        let start = self.out.len();
        self.out.push_str(open);
        let mark = self.out.len();
        self.frames.push(Frame {
            start,
            mark,
            close,
            fallback: None,
            after,
            list: false,
        });
    }

    /// Opens an inline formatting tag unless the same one is already open.
    fn inline(&mut self, name: &'static str, close: &'static str, after: After) {
        if self.inside(close) {
            self.push("", "", after);
        } else {
            self.push(name, close, after);
        }
    }

    fn link(&mut self, url: &str, email: bool) {
        let href = link_href(url, email, &TELEGRAM_SCHEMES);
        let Some(href) = href.filter(|_| !self.inside("</a>")) else {
            self.push("", "", After::Nothing);
            return;
        };
        let mut open = String::from("<a href=\"");
        escape_into(&mut open, &href, true);
        open.push_str("\">");
        self.push(&open, "</a>", After::Nothing);
        if let Some(frame) = self.frames.last_mut() {
            frame.fallback = Some(url.to_string());
        }
    }

    fn start(&mut self, tag: Tag) {
        match tag {
            Tag::Paragraph => self.push("", "", After::Block),
            Tag::Heading { .. } => self.inline("<b>", "</b>", After::Block),
            Tag::BlockQuote(_) => self.inline("<blockquote>", "</blockquote>", After::Block),
            Tag::CodeBlock(kind) => {
                let lang = code_language(&kind);
                let verbatim = if lang.is_empty() {
                    ("<pre>".to_string(), "</pre>", String::new())
                } else {
                    let open = format!("<pre><code class=\"language-{lang}\">");
                    (open, "</code></pre>", String::new())
                };
                self.verbatim = Some(verbatim);
                self.push("", "", After::Block);
            }
            Tag::HtmlBlock => {
                self.verbatim = Some((String::new(), "", String::new()));
                self.push("", "", After::Block);
            }
            Tag::List(first) => {
                self.lists.push(first);
                self.push("", "", After::Block);
                if let Some(frame) = self.frames.last_mut() {
                    frame.list = true;
                }
            }
            Tag::Item => {
                self.want(1);
                self.flush();
                let depth = self.lists.len().saturating_sub(1);
                self.out.push_str(&"  ".repeat(depth));
                match self.lists.last_mut() {
                    Some(Some(n)) => {
                        self.out.push_str(&format!("{n}. "));
                        *n += 1;
                    }
                    _ => self.out.push_str("• "),
                }
                self.push("", "", After::Line);
            }
            Tag::Table(_) => self.push("", "", After::Block),
            Tag::TableHead | Tag::TableRow => {
                self.want(1);
                self.cells = 0;
                self.push("", "", After::Line);
            }
            Tag::TableCell => {
                if self.cells > 0 {
                    self.flush();
                    self.out.push_str(" | ");
                }
                self.cells += 1;
                self.push("", "", After::Nothing);
            }
            Tag::Emphasis => self.inline("<i>", "</i>", After::Nothing),
            Tag::Strong => self.inline("<b>", "</b>", After::Nothing),
            Tag::Strikethrough => self.inline("<s>", "</s>", After::Nothing),
            Tag::Link {
                link_type,
                dest_url,
                ..
            }
            | Tag::Image {
                link_type,
                dest_url,
                ..
            } => {
                self.link(&dest_url, link_type == LinkType::Email);
            }
            _ => self.push("", "", After::Nothing),
        }
    }

    fn end(&mut self) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        if let Some((open, close, buf)) = self.verbatim.take() {
            let content = buf.trim_end_matches(['\n', '\r']);
            if !content.trim().is_empty() {
                self.flush();
                self.out.push_str(&open);
                escape_into(&mut self.out, content, false);
                self.out.push_str(close);
            }
        }
        if frame.list {
            self.lists.pop();
        }
        if self.out.len() == frame.mark && frame.mark > frame.start {
            match &frame.fallback {
                Some(url) => escape_into(&mut self.out, url, false),
                None => self.out.truncate(frame.start),
            }
        }
        if self.out.len() > frame.start || frame.close.is_empty() {
            self.out.push_str(frame.close);
        }
        match frame.after {
            After::Nothing => {}
            After::Line => self.want(1),
            After::Block => self.want(self.block_sep()),
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(_) => self.end(),
            Event::Text(text) | Event::InlineMath(text) | Event::DisplayMath(text) => {
                self.text(&text);
            }
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::Code(code) => {
                self.flush();
                let tagged = !self.inside("</a>");
                if tagged {
                    self.out.push_str("<code>");
                }
                escape_into(&mut self.out, &code, false);
                if tagged {
                    self.out.push_str("</code>");
                }
            }
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
            Event::SoftBreak | Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.text("———");
                self.want(self.block_sep());
            }
            Event::TaskListMarker(done) => self.text(if done { "☑ " } else { "☐ " }),
        }
    }

    fn finish(mut self) -> String {
        while let Some(frame) = self.frames.pop() {
            self.out.push_str(frame.close);
        }
        let len = self.out.trim_end().len();
        self.out.truncate(len);
        self.out
    }
}
