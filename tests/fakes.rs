//! Self-tests of the fakes' file, media, edit, transcription and vision endpoints: what crosses
//! the wire with plain reqwest, and the real teloxide and serenity clients against them. Every
//! step is bounded; nothing reaches the internet.

// Its Discord tests need the `discord` feature; what they share with the others is then unused.
#![cfg_attr(not(feature = "discord"), allow(unused_imports))]

use crate::support;

use serde_json::{Value, json};
use support::fake_discord::{self, FakeDiscord, Msg};
use support::fake_openai::{self, FakeOpenAi};
use support::fake_telegram::{self, FakeTelegram, TOKEN};
use support::wait::bounded;

/// `n` bytes of a repeating, non-trivial pattern.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// `POST <api_base>/bot<TOKEN>/<method>` on the fake Telegram.
fn tg_url(fake: &FakeTelegram, method: &str) -> String {
    format!("{}/bot{TOKEN}/{method}", fake.api_base())
}

/// Posts `body` as JSON; returns the status and the JSON answer.
async fn post_json(url: &str, body: Value) -> (u16, Value) {
    let resp = bounded(reqwest::Client::new().post(url).json(&body).send())
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, bounded(resp.json()).await.expect("JSON answer"))
}

/// Posts a multipart form; returns the status and the JSON answer.
async fn post_form(url: &str, form: reqwest::multipart::Form) -> (u16, Value) {
    let resp = bounded(reqwest::Client::new().post(url).multipart(form).send())
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, bounded(resp.json()).await.expect("JSON answer"))
}

/// GETs `url`; returns the status, the `content-length` header and the body.
async fn download(url: impl reqwest::IntoUrl) -> (u16, Option<u64>, Vec<u8>) {
    let resp = bounded(reqwest::get(url)).await.expect("request");
    let status = resp.status().as_u16();
    let length = resp
        .headers()
        .get(reqwest::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body = bounded(resp.bytes()).await.expect("body").to_vec();
    (status, length, body)
}

/// A file part of `bytes` named `filename` with `mime`.
fn file_part(bytes: Vec<u8>, filename: &str, mime: &str) -> reqwest::multipart::Part {
    reqwest::multipart::Part::bytes(bytes)
        .file_name(filename.to_owned())
        .mime_str(mime)
        .unwrap()
}

#[tokio::test]
async fn telegram_get_file_then_download_serves_the_bytes() {
    let fake = fake_telegram::start().await;
    let data = pattern(300_000);
    let path = fake.add_file("doc-1", data.clone());

    let (status, body) = post_json(&tg_url(&fake, "GetFile"), json!({"file_id": "doc-1"})).await;
    assert_eq!(status, 200, "{body}");
    let file = &body["result"];
    assert_eq!(file["file_id"], "doc-1");
    assert_eq!(file["file_size"], 300_000);
    assert_eq!(file["file_path"], path.as_str());
    assert!(file["file_unique_id"].is_string(), "{file}");

    // teloxide's URL: path segments, so the `/`s of the file path arrive percent-encoded.
    let mut url = reqwest::Url::parse(&fake.api_base()).unwrap();
    url.path_segments_mut()
        .unwrap()
        .push("file")
        .push(&format!("bot{TOKEN}"))
        .push(&path);
    assert!(url.as_str().contains("%2F"), "{url}");
    let (status, length, bytes) = download(url).await;
    assert_eq!((status, length), (200, Some(300_000)));
    assert!(bytes == data, "the download differs from the added file");
    // Raw slashes work too.
    let (status, _, bytes) = download(format!("{}/file/bot{TOKEN}/{path}", fake.api_base())).await;
    assert_eq!(status, 200);
    assert!(bytes == data, "the download differs from the added file");

    let (status, _, _) =
        download(format!("{}/file/bot{TOKEN}/files/9/nope", fake.api_base())).await;
    assert_eq!(status, 404);
    let downloads = fake.calls_of("file");
    let paths: Vec<&Value> = downloads.iter().map(|c| &c.body["file_path"]).collect();
    assert_eq!(paths, [&json!(path), &json!(path), &json!("files/9/nope")]);
    let failed: Vec<bool> = downloads.iter().map(|c| c.failed).collect();
    assert_eq!(failed, [false, false, true]);
}

#[tokio::test]
async fn telegram_get_file_of_an_unknown_id_is_a_400_and_sizes_can_lie() {
    let fake = fake_telegram::start().await;
    let (status, body) = post_json(&tg_url(&fake, "getFile"), json!({"file_id": "nope"})).await;
    assert_eq!(status, 400);
    assert_eq!(body, fake_telegram::invalid_file_id_body());
    assert!(fake.calls_of("getFile")[0].failed);

    let path = fake.add_file_reporting_size("big", pattern(1000), 30_000_000);
    let (status, body) = post_json(&tg_url(&fake, "getFile"), json!({"file_id": "big"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["file_size"], 30_000_000);
    let (_, length, bytes) = download(format!("{}/file/bot{TOKEN}/{path}", fake.api_base())).await;
    assert_eq!((length, bytes.len()), (Some(1000), 1000));
}

#[tokio::test]
async fn telegram_send_document_multipart_is_recorded_and_answered_with_a_message() {
    let fake = fake_telegram::start().await;
    let data = pattern(70_000);
    let form = reqwest::multipart::Form::new()
        .text("chat_id", "42")
        .text("caption", "the report")
        .text("reply_parameters", r#"{"message_id":5}"#)
        .part(
            "document",
            file_part(data.clone(), "report.pdf", "application/pdf"),
        );
    let (status, body) = post_form(&tg_url(&fake, "sendDocument"), form).await;
    assert_eq!(status, 200, "{body}");
    let message = &body["result"];
    assert_eq!(message["message_id"], 1001);
    assert_eq!(message["chat"]["id"], 42);
    assert_eq!(message["from"]["id"], fake_telegram::BOT_ID);
    assert_eq!(message["caption"], "the report");
    assert!(message.get("text").is_none(), "{message}");
    let document = &message["document"];
    assert_eq!(document["file_name"], "report.pdf");
    assert_eq!(document["file_size"], 70_000);
    assert_eq!(document["mime_type"], "application/pdf");

    let call = &fake.calls_of("sendDocument")[0];
    assert!(!call.failed);
    assert_eq!(call.body["chat_id"], 42);
    assert_eq!(call.body["caption"], "the report");
    assert_eq!(call.body["reply_parameters"]["message_id"], 5);
    assert_eq!(
        call.body["file"],
        json!({"field": "document", "filename": "report.pdf", "size": 70_000,
               "content_type": "application/pdf", "param": "document"})
    );
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].0, "senddocument");
    assert!(
        uploads[0].1 == data,
        "the kept upload differs from what was sent"
    );

    // The sent file can be fetched back by its new file_id.
    let file_id = document["file_id"].clone();
    let (status, body) = post_json(&tg_url(&fake, "getFile"), json!({"file_id": file_id})).await;
    assert_eq!(
        (status, &body["result"]["file_size"]),
        (200, &json!(70_000))
    );
}

#[tokio::test]
async fn telegram_media_uploads_obey_injected_faults() {
    let fake = fake_telegram::start().await;
    fake.fail_next("sendVoice", 429, fake_telegram::retry_after_body(1));
    let voice = || {
        reqwest::multipart::Form::new()
            .text("chat_id", "42")
            .part("voice", file_part(pattern(500), "v.ogg", "audio/ogg"))
    };
    let (status, body) = post_form(&tg_url(&fake, "sendVoice"), voice()).await;
    assert_eq!(status, 429);
    assert_eq!(body["parameters"]["retry_after"], 1);
    assert!(fake.uploads().is_empty(), "a failed upload was kept");

    let (status, body) = post_form(&tg_url(&fake, "SendVoice"), voice()).await;
    assert_eq!(status, 200, "{body}");
    let voice = &body["result"]["voice"];
    assert_eq!(
        (&voice["duration"], &voice["mime_type"]),
        (&json!(1), &json!("audio/ogg"))
    );
    let failed: Vec<bool> = fake
        .calls_of("sendVoice")
        .iter()
        .map(|c| c.failed)
        .collect();
    assert_eq!(failed, [true, false]);
    assert_eq!(fake.uploads().len(), 1);
}

#[tokio::test]
async fn telegram_edit_to_the_same_text_is_not_modified() {
    let fake = fake_telegram::start().await;
    let (_, sent) = post_json(
        &tg_url(&fake, "sendMessage"),
        json!({"chat_id": 42, "text": "draft"}),
    )
    .await;
    let id = sent["result"]["message_id"].as_i64().unwrap();
    let edit = |text: &str| json!({"chat_id": 42, "message_id": id, "text": text});

    let (status, body) = post_json(&tg_url(&fake, "editMessageText"), edit("draft")).await;
    assert_eq!(status, 400);
    assert_eq!(body, fake_telegram::message_not_modified_body());

    let (status, body) = post_json(&tg_url(&fake, "EditMessageText"), edit("final")).await;
    assert_eq!(status, 200, "{body}");
    let edited = &body["result"];
    assert_eq!(
        (&edited["message_id"], &edited["text"]),
        (&json!(id), &json!("final"))
    );
    assert!(edited["edit_date"].is_i64(), "{edited}");
    assert_eq!(fake.current_text(id).as_deref(), Some("final"));
    let (status, _) = post_json(&tg_url(&fake, "editMessageText"), edit("final")).await;
    assert_eq!(status, 400);

    fake.fail_next("editMessageText", 429, fake_telegram::retry_after_body(1));
    let (status, body) = post_json(&tg_url(&fake, "editMessageText"), edit("later")).await;
    assert_eq!(
        (status, &body["parameters"]["retry_after"]),
        (429, &json!(1))
    );
    let failed: Vec<bool> = fake
        .calls_of("editMessageText")
        .iter()
        .map(|c| c.failed)
        .collect();
    assert_eq!(failed, [true, false, true, true]);
    assert_eq!(fake.current_text(id).as_deref(), Some("final"));
}

#[cfg(feature = "telegram")]
#[tokio::test]
async fn teloxide_downloads_uploads_and_edits_against_the_fake() {
    use teloxide::net::Download;
    use teloxide::prelude::*;
    use teloxide::types::{FileId, InputFile, MessageId, ReplyParameters};
    use teloxide::{ApiError, RequestError};

    let fake = fake_telegram::start().await;
    let bot = Bot::new(TOKEN).set_api_url(reqwest::Url::parse(&fake.api_base()).unwrap());
    let data = pattern(150_000);
    let path = fake.add_file("voice-1", data.clone());

    let file = bounded(bot.get_file(FileId("voice-1".into())).into_future())
        .await
        .unwrap();
    assert_eq!(
        (file.path.as_str(), file.meta.size),
        (path.as_str(), 150_000)
    );
    let mut out = Vec::new();
    bounded(bot.download_file(&file.path, &mut out))
        .await
        .unwrap();
    assert!(out == data, "teloxide downloaded other bytes");
    assert_eq!(fake.calls_of("file")[0].body["file_path"], path.as_str());

    let doc = pattern(4096);
    let sent = bot
        .send_document(
            ChatId(42),
            InputFile::memory(doc.clone()).file_name("notes.txt"),
        )
        .caption("notes")
        .reply_parameters(ReplyParameters::new(MessageId(5)));
    let sent = bounded(sent.into_future()).await.unwrap();
    let document = sent.document().expect("a document message");
    assert_eq!(document.file_name.as_deref(), Some("notes.txt"));
    assert_eq!((document.file.size, sent.caption()), (4096, Some("notes")));
    // teloxide names the file part with a random id and points the parameter at it.
    let body = &fake.calls_of("sendDocument")[0].body;
    let attach = body["document"].as_str().expect("document field");
    let part = attach
        .strip_prefix("attach://")
        .expect("an attach:// reference");
    assert_eq!(body["file"]["field"], part);
    assert_eq!(
        (&body["file"]["param"], &body["file"]["size"]),
        (&json!("document"), &json!(4096))
    );
    assert_eq!(body["file"]["filename"], "notes.txt");
    assert_eq!(
        (&body["chat_id"], &body["reply_parameters"]["message_id"]),
        (&json!(42), &json!(5))
    );

    let voice = bot.send_voice(
        ChatId(42),
        InputFile::memory(pattern(900)).file_name("v.ogg"),
    );
    let voice = bounded(voice.into_future()).await.unwrap();
    assert_eq!(voice.voice().expect("a voice message").file.size, 900);
    let audio = bot.send_audio(
        ChatId(42),
        InputFile::memory(pattern(800)).file_name("a.mp3"),
    );
    let audio = bounded(audio.into_future()).await.unwrap();
    assert_eq!(audio.audio().expect("an audio message").file.size, 800);
    let photo = bot.send_photo(
        ChatId(42),
        InputFile::memory(pattern(700)).file_name("p.jpg"),
    );
    let photo = bounded(photo.into_future()).await.unwrap();
    assert_eq!(photo.photo().expect("a photo message").len(), 1);
    assert_eq!(fake.uploads().len(), 4);

    let text = bounded(bot.send_message(ChatId(42), "same").into_future())
        .await
        .unwrap();
    let err = bounded(
        bot.edit_message_text(ChatId(42), text.id, "same")
            .into_future(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, RequestError::Api(ApiError::MessageNotModified)),
        "{err:?}"
    );
    let edited = bounded(
        bot.edit_message_text(ChatId(42), text.id, "changed")
            .into_future(),
    )
    .await
    .unwrap();
    assert_eq!((edited.id, edited.text()), (text.id, Some("changed")));
    assert!(edited.edit_date().is_some());
}

/// A transcription form: `bytes` as `voice.ogg`, model `whisper-1`, and `extra` text fields.
fn transcription_form(bytes: Vec<u8>, extra: &[(&str, &str)]) -> reqwest::multipart::Form {
    let mut form = reqwest::multipart::Form::new()
        .part("file", file_part(bytes, "voice.ogg", "audio/ogg"))
        .text("model", "whisper-1");
    for (name, value) in extra {
        form = form.text(name.to_string(), value.to_string());
    }
    form
}

/// Posts a transcription form with a bearer key; returns the status and the raw answer.
async fn transcribe(fake: &FakeOpenAi, form: reqwest::multipart::Form) -> (u16, String) {
    let url = format!("{}/audio/transcriptions", fake.base_url());
    let request = reqwest::Client::new()
        .post(url)
        .bearer_auth("sk-test")
        .multipart(form);
    let resp = bounded(request.send()).await.expect("request");
    let status = resp.status().as_u16();
    (status, bounded(resp.text()).await.expect("body"))
}

#[tokio::test]
async fn openai_transcription_answers_the_queue_and_records_the_upload() {
    let fake = fake_openai::start().await;
    fake.push_transcript("hello world");
    let (status, body) = transcribe(
        &fake,
        transcription_form(pattern(5000), &[("language", "en")]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"text": "hello world"})
    );
    let t = &fake.wait_for_transcriptions(1, support::wait::WAIT).await[0];
    assert_eq!(
        (t.model.as_str(), t.filename.as_str(), t.size),
        ("whisper-1", "voice.ogg", 5000)
    );
    assert_eq!(t.content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(t.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(t.field("language"), Some("en"));
    assert_eq!(
        fake.request_count(),
        0,
        "a transcription counted as a chat request"
    );

    let error = r#"{"error":{"message":"slow down","type":"rate_limit"}}"#;
    fake.push_transcription_error(429, error.to_owned());
    fake.push_transcript("plain words");
    let (status, body) = transcribe(&fake, transcription_form(pattern(10), &[])).await;
    assert_eq!((status, body.as_str()), (429, error));
    // A form without a file is refused without consuming the queue.
    let no_file = reqwest::multipart::Form::new().text("model", "whisper-1");
    let (status, _) = transcribe(&fake, no_file).await;
    assert_eq!(status, 400);
    let form = transcription_form(pattern(10), &[("response_format", "text")]);
    let (status, body) = transcribe(&fake, form).await;
    assert_eq!((status, body.as_str()), (200, "plain words"));
    let (status, body) = transcribe(&fake, transcription_form(pattern(10), &[])).await;
    assert_eq!(status, 500);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["message"], "no transcript queued");
    assert_eq!(fake.transcriptions().len(), 5);
}

/// A chat request whose user message is `parts`.
fn chat_with_parts(parts: Value) -> Value {
    json!({"model": "fake", "messages": [{"role": "user", "content": parts}]})
}

#[tokio::test]
async fn openai_reject_images_answers_400_without_consuming_the_script() {
    let fake = fake_openai::start().await;
    fake.push_text("described");
    fake.reject_images(true);
    let url = format!("{}/chat/completions", fake.base_url());
    let image = "data:image/jpeg;base64,/9j/4AAQ";
    let with_image = chat_with_parts(json!([
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": image}},
    ]));

    let (status, body) = post_json(&url, with_image.clone()).await;
    assert_eq!(status, 400);
    assert_eq!(body, fake_openai::images_rejected_body());
    assert_eq!((fake.request_count(), fake.pending_replies()), (1, 1));
    assert_eq!(fake_openai::image_urls(&fake.requests()[0]), [image]);

    // Parts without an image are fine, and their text is the user's text.
    let text_only = chat_with_parts(json!([{"type": "text", "text": "hi there"}]));
    let (status, body) = post_json(&url, text_only).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "described");
    assert_eq!(fake_openai::last_user_text(&fake.requests()[1]), "hi there");

    fake.reject_images(false);
    let (status, body) = post_json(&url, with_image).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        fake_openai::DEFAULT_REPLY
    );
    assert_eq!(
        fake_openai::last_user_text(&fake.requests()[2]),
        "what is this?"
    );
}

#[cfg(feature = "discord")]
#[tokio::test]
async fn discord_attachments_are_served_and_counted() {
    let fake = fake_discord::start().await;
    let data = pattern(200_000);
    let url = fake.add_attachment("notes file.txt", data.clone());
    assert!(
        url.starts_with(&format!("{}/attachments/", fake.api_base())),
        "{url}"
    );
    assert!(url.ends_with("/notes%20file.txt"), "{url}");

    let (status, length, bytes) = download(url.as_str()).await;
    assert_eq!((status, length), (200, Some(200_000)));
    assert!(bytes == data, "the download differs from the attachment");
    let (status, _, _) = download(format!("{}/attachments/1/2/nope.txt", fake.api_base())).await;
    assert_eq!(status, 404);
    assert_eq!(fake.attachment_downloads(), 1);

    // serenity reads the incoming attachment and downloads it from the fake.
    let msg = Msg::dm("555", fake_discord::user("42", "alice"), "see file").attachment_at(
        "31",
        "notes file.txt",
        Some("text/plain"),
        200_000,
        &url,
    );
    let msg: serenity::model::channel::Message = serde_json::from_value(msg.into()).unwrap();
    let downloaded = bounded(msg.attachments[0].download()).await.unwrap();
    assert!(downloaded == data, "serenity downloaded other bytes");
    assert_eq!(fake.attachment_downloads(), 2);
}

/// `POST /api/v10/channels/555/messages` with `form`; returns the status and the answer.
async fn post_discord_form(fake: &FakeDiscord, form: reqwest::multipart::Form) -> (u16, Value) {
    let url = format!("{}/api/v10/channels/555/messages", fake.api_base());
    let request = reqwest::Client::new()
        .post(url)
        .header("authorization", "Bot test-token")
        .multipart(form);
    let resp = bounded(request.send()).await.expect("request");
    let status = resp.status().as_u16();
    (status, bounded(resp.json()).await.expect("JSON answer"))
}

#[tokio::test]
async fn discord_multipart_message_is_recorded_with_its_files() {
    let fake = fake_discord::start().await;
    let data = pattern(30_000);
    let payload = json!({"content": "here", "attachments": [{"id": 0, "filename": "a.txt"}]});
    let form = reqwest::multipart::Form::new()
        .part("files[0]", file_part(data.clone(), "a.txt", "text/plain"))
        .text("payload_json", payload.to_string());
    let (status, message) = post_discord_form(&fake, form).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["content"], "here");
    let attachment = &message["attachments"][0];
    assert_eq!(
        (&attachment["filename"], &attachment["size"]),
        (&json!("a.txt"), &json!(30_000))
    );
    assert_eq!(attachment["content_type"], "text/plain");

    let posted = &fake.posted_messages()[0];
    assert_eq!(
        (posted.channel_id.as_str(), posted.content()),
        ("555", "here")
    );
    assert_eq!(
        posted.body["attachments_uploaded"],
        json!([{"field": "files[0]", "filename": "a.txt", "size": 30_000, "content_type": "text/plain"}])
    );
    assert_eq!(posted.body["attachments"], payload["attachments"]);
    let recorded = fake.requests_to("POST", "/api/v10/channels/555/messages");
    assert_eq!(recorded[0].body, posted.body);
    let uploads = fake.uploaded_files();
    assert_eq!(uploads.len(), 1);
    assert!(
        uploads[0].0 == "a.txt" && uploads[0].1 == data,
        "the kept upload differs"
    );

    let url = attachment["url"].as_str().unwrap();
    let (status, _, bytes) = download(url).await;
    assert_eq!(status, 200);
    assert!(bytes == data, "the uploaded file downloads as other bytes");
}

#[cfg(feature = "discord")]
#[tokio::test]
async fn serenity_sends_files_to_the_fake() {
    use serenity::builder::{CreateAttachment, CreateMessage};
    use serenity::http::HttpBuilder;
    use serenity::model::id::ChannelId;

    let fake = fake_discord::start().await;
    let http = HttpBuilder::new("test-token")
        .proxy(fake.api_base())
        .ratelimiter_disabled(true)
        .build();
    let data = pattern(12_345);
    let message = CreateMessage::new()
        .content("see file")
        .add_file(CreateAttachment::bytes(data.clone(), "report.txt"))
        .add_file(CreateAttachment::bytes(pattern(10), "b.png"));
    let sent = bounded(ChannelId::new(555).send_message(&http, message))
        .await
        .unwrap();
    assert_eq!(sent.content, "see file");
    assert_eq!(sent.attachments.len(), 2);
    let downloaded = bounded(sent.attachments[0].download()).await.unwrap();
    assert!(downloaded == data, "serenity downloaded other bytes");

    // serenity names the parts `files[N]`, guesses their type from the name, and sends the
    // message as `payload_json` (after the files) with matching `attachments` ids.
    let body = &fake.posted_messages()[0].body;
    assert_eq!(body["content"], "see file");
    let uploaded = &body["attachments_uploaded"];
    assert_eq!(
        (&uploaded[0]["field"], &uploaded[1]["field"]),
        (&json!("files[0]"), &json!("files[1]"))
    );
    assert_eq!(
        (&uploaded[0]["content_type"], &uploaded[1]["content_type"]),
        (&json!("text/plain"), &json!("image/png"))
    );
    assert_eq!(uploaded[0]["size"], 12_345);
    assert_eq!(
        body["attachments"][1],
        json!({"id": 1, "filename": "b.png", "description": null})
    );
}
