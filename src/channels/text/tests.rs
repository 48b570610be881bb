use super::*;
use proptest::prelude::*;

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn is_fence_line(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn fence_lines(s: &str) -> usize {
    s.lines().filter(|l| is_fence_line(l)).count()
}

/// Input and output with fence lines and all whitespace removed.
fn content(s: &str) -> String {
    s.lines()
        .filter(|l| !is_fence_line(l))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[test]
fn a_live_text_is_cut_to_the_limit_with_an_ellipsis() {
    assert_eq!(cut("hello", 5), "hello");
    assert_eq!(cut("hello!", 5), "hell…");
    assert_eq!(cut("日本語のテキスト", 4), "日本語…");
    assert_eq!(cut("", 3), "");
}

/// Checks every `split` invariant that does not depend on fence repair.
fn check_split(text: &str, limit: usize) -> Vec<String> {
    let chunks = split(text, limit);
    let doc = Doc::parse(text, limit.max(1));
    let pieces = plan(&doc);
    assert_eq!(chunks.len(), pieces.len());
    let mut last = 0;
    for (chunk, piece) in chunks.iter().zip(&pieces) {
        assert!(
            chars(chunk) <= limit.max(1),
            "chunk over {limit}: {chunk:?}"
        );
        assert!(!chunk.trim().is_empty(), "blank chunk");
        assert_eq!(chunk, &doc.render(piece));
        // Pieces are ordered slices of the input with only whitespace between them.
        assert!(piece.range.start >= last && piece.range.start < piece.range.end);
        assert!(text[last..piece.range.start].trim().is_empty(), "lost text");
        last = piece.range.end;
    }
    assert!(text[last..].trim().is_empty(), "lost tail");
    chunks
}

#[test]
fn fitting_text_is_returned_as_is() {
    assert_eq!(
        split("  hello\n\nworld  \n\n", 100),
        vec!["  hello\n\nworld"]
    );
    assert_eq!(split("exactly10!", 10), vec!["exactly10!"]);
    assert!(split("", 10).is_empty());
    assert!(split(" \n\t\n ", 10).is_empty());
}

#[test]
fn prefers_paragraph_then_line_then_word() {
    let a = "a".repeat(30);
    let b = "b".repeat(30);
    let text = format!("{a} {a}\n{a}\n\n{b}");
    assert_eq!(
        check_split(&text, 100),
        vec![format!("{a} {a}\n{a}"), b.clone()]
    );
    let text = format!("{a} {a}\n{a} {b}");
    assert_eq!(
        check_split(&text, 80),
        vec![format!("{a} {a}"), format!("{a} {b}")]
    );
    let text = format!("{a} {a} {b}");
    assert_eq!(check_split(&text, 80), vec![format!("{a} {a}"), b.clone()]);
    // A paragraph break early in the window loses to a later line break.
    let text = format!("Title\n\n{a}\n{a}\n{b}");
    assert_eq!(check_split(&text, 70)[0], format!("Title\n\n{a}\n{a}"));
}

#[test]
fn hard_cuts_long_words_by_chars() {
    assert_eq!(check_split("ééééééé", 3), vec!["ééé", "ééé", "é"]);
    assert_eq!(
        check_split("ab abcdefghij", 4),
        vec!["ab", "abcd", "efgh", "ij"]
    );
    // Combining marks stay with their base letter.
    let text = "e\u{301}".repeat(5);
    for chunk in check_split(&text, 3) {
        assert!(!chunk.starts_with('\u{301}'), "{chunk:?}");
    }
}

#[test]
fn crlf_and_blank_runs() {
    let text = format!("{}\r\n\r\n\r\n\r\n{}\r\n", "x".repeat(8), "y".repeat(8));
    assert_eq!(check_split(&text, 10), vec!["x".repeat(8), "y".repeat(8)]);
}

#[test]
fn fences_are_closed_and_reopened() {
    let body: Vec<String> = (0..20).map(|i| format!("let x{i} = {i};")).collect();
    let intro = "Some words before the code. ".repeat(2);
    let text = format!("{intro}\n\n```rust\n{}\n```\n\nOutro", body.join("\n"));
    let chunks = check_split(&text, 80);
    assert!(chunks.len() > 3);
    assert_eq!(chunks[0], intro.trim_end(), "cut before the fence");
    for chunk in &chunks[1..] {
        assert!(chunk.starts_with("```rust\n"), "{chunk:?}");
    }
    for chunk in &chunks[1..chunks.len() - 1] {
        assert!(chunk.ends_with("\n```"), "{chunk:?}");
    }
    assert!(chunks.last().unwrap().ends_with("```\n\nOutro"));
    assert!(chunks.iter().all(|c| fence_lines(c).is_multiple_of(2)));
    let joined = chunks.join("\n");
    assert_eq!(content(&joined), content(&text));
}

#[test]
fn fence_closer_keeps_indentation_and_char() {
    let text = format!(
        "1. step\n   ~~~~sh\n   {}\n   {}\n   ~~~~",
        "a".repeat(20),
        "b".repeat(20)
    );
    let chunks = check_split(&text, 42);
    assert_eq!(
        chunks[1],
        format!("   ~~~~sh\n   {}\n   ~~~~", "a".repeat(20))
    );
    assert!(
        chunks.iter().all(|c| fence_lines(c).is_multiple_of(2)),
        "{chunks:?}"
    );
}

#[test]
fn long_code_line_is_wrapped_inside_fences() {
    let text = format!("```\n{}\n```", "x".repeat(50));
    let chunks = check_split(&text, 20);
    assert!(
        chunks
            .iter()
            .all(|c| c.starts_with("```\n") && c.ends_with("\n```")),
        "{chunks:?}"
    );
    assert_eq!(content(&chunks.concat()), "x".repeat(50));
}

#[test]
fn degenerate_limits_do_not_loop() {
    assert_eq!(check_split("abc", 0), vec!["a", "b", "c"]);
    assert_eq!(check_split("a b\n\nc", 1), vec!["a", "b", "c"]);
    // Too small to repeat the fence lines: the fence is cut like plain text.
    let text = "```python\nprint(1)\n```";
    let chunks = check_split(text, 6);
    assert!(chunks.len() > 3);
    assert_eq!(squash(&chunks.concat()), squash(text));
    // Leading whitespace longer than the limit is dropped.
    assert_eq!(
        check_split(&format!("{}word", " ".repeat(30)), 5),
        vec!["word"]
    );
}

#[test]
fn html_plain_text_is_only_escaped() {
    let text = "Hello & <world> \"q\" it's\nsecond line\n\nnext paragraph";
    assert_eq!(
        telegram_html(text),
        "Hello &amp; &lt;world&gt; \"q\" it's\nsecond line\n\nnext paragraph"
    );
}

#[test]
fn html_inline_formatting() {
    assert_eq!(
        telegram_html("**b** *i* ~~s~~ `c<>` ***bi***"),
        "<b>b</b> <i>i</i> <s>s</s> <code>c&lt;&gt;</code> <i><b>bi</b></i>"
    );
    assert_eq!(
        telegram_html("# Title **x**\n\nText"),
        "<b>Title x</b>\n\nText"
    );
    assert_eq!(telegram_html("a  \nb\\\nc"), "a\nb\nc");
    assert_eq!(telegram_html("#\n\nx"), "x");
}

#[test]
fn html_lists() {
    assert_eq!(
        telegram_html("- a\n- b\n\n3. x\n4. y"),
        "• a\n• b\n\n3. x\n4. y"
    );
    assert_eq!(
        telegram_html("- a\n  - b\n- c\n\nend"),
        "• a\n  • b\n• c\n\nend"
    );
    assert_eq!(telegram_html("- a\n\n- b"), "• a\n• b");
    assert_eq!(
        telegram_html("- [x] done\n- [ ] todo"),
        "• ☑ done\n• ☐ todo"
    );
}

#[test]
fn html_code_blocks() {
    assert_eq!(
        telegram_html("```rust\nfn main() { a < b && c }\n```\nafter"),
        "<pre><code class=\"language-rust\">fn main() { a &lt; b &amp;&amp; c }</code></pre>\n\nafter"
    );
    assert_eq!(telegram_html("```\nx\n\ny\n```"), "<pre>x\n\ny</pre>");
    assert_eq!(telegram_html("    indented"), "<pre>indented</pre>");
    assert_eq!(
        telegram_html("```\"><b>\nx\n```"),
        "<pre><code class=\"language-b\">x</code></pre>"
    );
    assert_eq!(telegram_html("```\n```"), "");
}

#[test]
fn html_links_and_images() {
    assert_eq!(
        telegram_html("[x **y**](https://e.com/?a=1&b=\"2\")"),
        "<a href=\"https://e.com/?a=1&amp;b=&quot;2&quot;\">x <b>y</b></a>"
    );
    assert_eq!(
        telegram_html("[rel](/path) [js](javascript:alert(1))"),
        "rel js"
    );
    assert_eq!(
        telegram_html("[`code`](https://e.com)"),
        "<a href=\"https://e.com\">code</a>"
    );
    assert_eq!(
        telegram_html("[](https://e.com)"),
        "<a href=\"https://e.com\">https://e.com</a>"
    );
    assert_eq!(
        telegram_html("<a@b.c>"),
        "<a href=\"mailto:a@b.c\">a@b.c</a>"
    );
    assert_eq!(
        telegram_html("![cat](https://e.com/c.png)"),
        "<a href=\"https://e.com/c.png\">cat</a>"
    );
    assert_eq!(
        telegram_html("[![cat](https://e.com/c.png)](https://e.com)"),
        "<a href=\"https://e.com\">cat</a>"
    );
}

#[test]
fn html_raw_html_quotes_tables_rules() {
    assert_eq!(
        telegram_html("a <b>x</b> <br>"),
        "a &lt;b&gt;x&lt;/b&gt; &lt;br&gt;"
    );
    assert_eq!(
        telegram_html("<div>\n<script>x</script>\n</div>"),
        "&lt;div&gt;\n&lt;script&gt;x&lt;/script&gt;\n&lt;/div&gt;"
    );
    assert_eq!(
        telegram_html("> quote\n> more\n\ntext"),
        "<blockquote>quote\nmore</blockquote>\n\ntext"
    );
    assert_eq!(
        telegram_html("> a\n> > b"),
        "<blockquote>a\n\nb</blockquote>"
    );
    assert_eq!(
        telegram_html("| a | b |\n|---|---|\n| 1 | **2** |"),
        "a | b\n1 | <b>2</b>"
    );
    assert_eq!(telegram_html("a\n\n---\n\nb"), "a\n\n———\n\nb");
}

/// Checks Telegram HTML: allowed tags only, balanced and nested by Telegram's rules, text escaped.
fn check_html(html: &str) -> Result<(), String> {
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(['<', '>', '&']) {
        let at = &rest[i..];
        if at.starts_with('>') {
            return Err(format!("bare > in {html:?}"));
        }
        if at.starts_with('&') {
            let entity = ["&amp;", "&lt;", "&gt;", "&quot;"]
                .into_iter()
                .find(|e| at.starts_with(e));
            let entity = entity.ok_or(format!("bare & in {html:?}"))?;
            rest = &at[entity.len()..];
            continue;
        }
        let end = at.find('>').ok_or("unterminated tag")?;
        let tag = &at[1..end];
        rest = &at[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop() != Some(name) {
                return Err(format!("misnested </{name}> in {html:?}"));
            }
            continue;
        }
        let name = tag.split(' ').next().unwrap_or("");
        let ok_attrs = match name {
            "a" => tag
                .strip_prefix("a href=\"")
                .and_then(|v| v.strip_suffix('"'))
                .is_some_and(|v| !v.contains('"')),
            "code" => {
                tag == "code"
                    || tag
                        .strip_prefix("code class=\"language-")
                        .is_some_and(|v| v.ends_with('"') && v.matches('"').count() == 1)
            }
            "b" | "i" | "s" | "u" | "pre" | "blockquote" => tag == name,
            _ => false,
        };
        let parent = stack.last().copied();
        let nest_ok = match parent {
            Some("code") => false,
            Some("pre") => name == "code",
            _ => true,
        } && !(matches!(name, "a" | "blockquote" | "pre" | "code")
            && stack.contains(&name))
            && !(name == "code" && stack.contains(&"a"));
        if !ok_attrs || !nest_ok {
            return Err(format!("bad <{tag}> under {stack:?} in {html:?}"));
        }
        stack.push(name);
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed {stack:?} in {html:?}"))
    }
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z]{1,10}",
        2 => "[а-яё]{1,6}",
        1 => Just("日本語".to_string()),
        1 => Just("👍🏽".to_string()),
        1 => Just("e\u{301}".to_string()),
        1 => "\\*\\*[a-z]{1,6}\\*\\*",
        1 => "`[a-z<&]{1,5}`",
        1 => "\\[[a-z]{1,5}\\]\\(https://x\\.io/[a-z]{0,5}\\)",
        1 => "[a-z]{30,300}",
    ]
}

fn line() -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 1..12).prop_map(|w| w.join(" "))
}

fn block() -> impl Strategy<Value = String> {
    let fence = (
        prop::sample::select(vec![
            "```", "```rust", "```sh", "~~~", "~~~toml", " ```py", "  ```",
        ]),
        prop::collection::vec(prop_oneof!["[ a-z(){};=<]{0,60}", "[a-z]{40,200}"], 0..10),
    )
        .prop_map(|(open, body)| {
            let indent = &open[..open.len() - open.trim_start().len()];
            let close = &open.trim_start()[..3];
            let body: Vec<String> = body.iter().map(|l| format!("{indent}{l}")).collect();
            format!("{open}\n{}\n{indent}{close}", body.join("\n"))
        });
    let list = prop::collection::vec(line(), 1..5).prop_map(|l| format!("- {}", l.join("\n- ")));
    prop_oneof![
        4 => prop::collection::vec(line(), 1..5).prop_map(|l| l.join("\n")),
        2 => fence,
        1 => list,
        1 => line().prop_map(|l| format!("## {l}")),
    ]
}

fn document() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            block(),
            prop::sample::select(vec!["\n", "\n\n", "\n\n\n", "\n \n"]),
        ),
        1..14,
    )
    .prop_map(|blocks| blocks.into_iter().map(|(b, sep)| b + sep).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn split_keeps_invariants(
        text in document(),
        limit in prop_oneof![20usize..120, 120usize..5000],
    ) {
        let chunks = check_split(&text, limit);
        for chunk in &chunks {
            prop_assert!(fence_lines(chunk).is_multiple_of(2), "unbalanced at {}: {:?}", limit, chunk);
        }
        prop_assert_eq!(content(&chunks.join("\n")), content(&text));
        if chars(text.trim_end()) <= limit {
            prop_assert_eq!(chunks, vec![text.trim_end().to_string()]);
        }
    }

    #[test]
    fn split_survives_any_text(text in "(?s).{0,300}", limit in 0usize..40) {
        check_split(&text, limit);
    }

    #[test]
    fn html_is_well_formed(text in prop_oneof![
        document(),
        "[a-z *_~`\\[\\]()<>&\"#|!\\n0-9.:/\\\\-]{0,200}",
        "([-*>#|`~ ]{0,4}[a-z<>&\"*_`\\[\\]()!:/.]{0,12}( |\\n|\\n\\n)){0,30}",
    ]) {
        let html = telegram_html(&text);
        if let Err(e) = check_html(&html) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn html_plain_text_is_unchanged(text in prop::collection::vec(
        prop::collection::vec(
            ("[A-Za-z]{1,8}", prop::collection::vec(prop_oneof![
                "[a-zA-Z]{1,8}", Just("&".to_string()), Just("a<b".to_string()), Just("x>y".to_string()),
                Just("AT&T".to_string()), Just("\"q\"".to_string()), Just("日本".to_string()), Just("🙂".to_string()),
            ], 0..8)).prop_map(|(first, rest)| std::iter::once(first).chain(rest).collect::<Vec<_>>().join(" ")),
            1..4,
        ).prop_map(|lines| lines.join("\n")),
        1..4,
    ).prop_map(|paragraphs| paragraphs.join("\n\n"))) {
        let mut escaped = String::new();
        escape_into(&mut escaped, &text, false);
        prop_assert_eq!(telegram_html(&text), escaped);
    }
}

#[test]
fn a_literal_is_one_line_of_text_that_formats_nothing() {
    let name = "Ann\n\nbub pair approve telegram EVIL1234 **now** <b>x</b> [a](https://e.x) `c` @here\u{202e}";
    let shown = literal(name, 200);
    assert!(
        !shown.contains('\n') && !shown.contains('\u{202e}'),
        "{shown}"
    );
    let html = telegram_html(&format!("from {shown} (id 7)"));
    assert!(
        !html.contains("<b>") && !html.contains("<a ") && !html.contains("<code>"),
        "{html}"
    );
    assert!(
        html.contains("**now**") && html.contains("&lt;b&gt;x&lt;/b&gt;"),
        "{html}"
    );
    assert!(
        html.contains("[a](https://e.x)") && html.contains("@here"),
        "{html}"
    );
    let long = literal(&"x".repeat(100), 10);
    assert_eq!(long, format!("{}…", "x".repeat(9)));
    assert_eq!(literal("ann_b", 64), "ann\\_b");
}
