//! What people and the agent wrote, as the console shows it: Markdown rendered to HTML, read,
//! escaped and linked as Telegram's renderer does it (`channels::text`: [`markdown`],
//! [`escape_into`], [`link_href`]), written here for a browser instead of Telegram's few tags.
//!
//! What a chat can put in a page is text and a few tags, never markup of its own:
//! * raw HTML in the text (`<script>`, `<img onerror=…>`) is shown as text, escaped;
//! * a link is `<a href=… rel="noopener noreferrer">` only to `http:`, `https:` or `mailto:`;
//!   any other (`javascript:`, `data:`, a relative path) is its text, with the address after
//!   it as text; an image is a link to it, never an `<img>` (a page loads nothing a chat names);
//! * every attribute value is escaped and double-quoted; the only attributes written are a
//!   link's `href`, `title` and `rel`, a code block's `class` and a list's `start`;
//! * code blocks are `<pre><code>`; a line break is a line break, as a chat shows it.
//!
//! Markup must not hide a secret from the page's redactor (`sk-test-**secret**` would show the
//! key while the redactor finds only pieces of it): a text in which the redactor finds a
//! secret — as written, or in what the rendering shows — is shown plain, escaped, and the page's
//! redactor replaces the secret whole.

use maud::{Markup, PreEscaped, html};
use pulldown_cmark::{Event, LinkType, Tag};

use crate::channels::text::{code_language, escape_into, link_href, markdown};
use crate::redact::Redactor;

/// The schemes a link in the console may have.
const SCHEMES: [&str; 3] = ["http://", "https://", "mailto:"];

/// `text` (Markdown) as a `div.text.md`, or — when a secret is in it — as a `div.text.plain`
/// holding the escaped text (see the module docs).
pub(super) fn render(text: &str, redactor: &Redactor) -> Markup {
    if !redactor.found(text.as_bytes()) {
        let (html, shown) = to_html(text);
        if !redactor.found(shown.as_bytes()) {
            return html! { div.text.md { (PreEscaped(html)) } };
        }
    }
    html! { div.text.plain { (text) } }
}

/// The HTML of `text`, and what it shows (its texts, link addresses and titles, one after
/// another) for the redaction check.
pub(super) fn to_html(text: &str) -> (String, String) {
    let mut w = Writer::default();
    for event in markdown(text) {
        w.event(event);
    }
    (w.out, w.shown)
}

#[derive(Default)]
struct Writer {
    out: String,
    shown: String,
    /// What closes each open element.
    closes: Vec<String>,
    /// Inside a table's head row (its cells are `th`).
    head: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        self.shown.push_str(text);
        escape_into(&mut self.out, text, false);
    }

    fn open(&mut self, open: &str, close: &str) {
        self.out.push_str(open);
        self.closes.push(close.to_owned());
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(_) => {
                let close = self.closes.pop().unwrap_or_default();
                self.out.push_str(&close);
            }
            // Raw HTML is text.
            Event::Text(text)
            | Event::Html(text)
            | Event::InlineHtml(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text) => self.text(&text),
            Event::Code(code) => {
                self.out.push_str("<code>");
                self.text(&code);
                self.out.push_str("</code>");
            }
            Event::SoftBreak | Event::HardBreak => self.out.push_str("<br>\n"),
            Event::Rule => self.out.push_str("<hr>\n"),
            Event::TaskListMarker(done) => self.text(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
        }
    }

    fn start(&mut self, tag: Tag) {
        match tag {
            Tag::Paragraph | Tag::HtmlBlock => self.open("<p>", "</p>\n"),
            Tag::Heading { level, .. } => {
                self.open(&format!("<{level}>"), &format!("</{level}>\n"));
            }
            Tag::BlockQuote(_) => self.open("<blockquote>\n", "</blockquote>\n"),
            Tag::CodeBlock(kind) => {
                let lang = code_language(&kind);
                let open = match lang.is_empty() {
                    true => "<pre><code>".to_owned(),
                    false => format!("<pre><code class=\"language-{lang}\">"),
                };
                self.open(&open, "</code></pre>\n");
            }
            Tag::List(Some(1)) => self.open("<ol>\n", "</ol>\n"),
            Tag::List(Some(n)) => self.open(&format!("<ol start=\"{n}\">\n"), "</ol>\n"),
            Tag::List(None) => self.open("<ul>\n", "</ul>\n"),
            Tag::Item => self.open("<li>", "</li>\n"),
            Tag::Table(_) => self.open("<table>\n", "</tbody></table>\n"),
            Tag::TableHead => {
                self.head = true;
                self.open("<thead><tr>", "</tr></thead><tbody>\n");
            }
            Tag::TableRow => {
                self.head = false;
                self.open("<tr>", "</tr>\n");
            }
            Tag::TableCell if self.head => self.open("<th>", "</th>"),
            Tag::TableCell => self.open("<td>", "</td>"),
            Tag::Emphasis => self.open("<em>", "</em>"),
            Tag::Strong => self.open("<strong>", "</strong>"),
            Tag::Strikethrough => self.open("<del>", "</del>"),
            Tag::Link {
                link_type,
                dest_url,
                title,
                ..
            }
            | Tag::Image {
                link_type,
                dest_url,
                title,
                ..
            } => {
                self.shown.push_str(&dest_url);
                self.shown.push_str(&title);
                match link_href(&dest_url, link_type == LinkType::Email, &SCHEMES) {
                    Some(href) => {
                        let mut open = String::from("<a href=\"");
                        escape_into(&mut open, &href, true);
                        if !title.is_empty() {
                            open.push_str("\" title=\"");
                            escape_into(&mut open, &title, true);
                        }
                        open.push_str("\" rel=\"noopener noreferrer\">");
                        self.open(&open, "</a>");
                    }
                    // Refused: its text, then the address as text.
                    None => {
                        let mut close = String::new();
                        if !dest_url.is_empty() {
                            escape_into(&mut close, &format!(" ({dest_url})"), false);
                        }
                        self.open("", &close);
                    }
                }
            }
            _ => self.open("", ""),
        }
    }
}

#[cfg(test)]
mod tests;
