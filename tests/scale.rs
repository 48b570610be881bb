//! Scaling out on PostgreSQL (`BUB_DATABASE_URL`), end to end: the real binary against a
//! throwaway cluster (`support::postgres`) and the fake model. `bub db migrate` / `status`, the
//! migrations every command runs at start, a schema from a newer Bub refused, and the tapes
//! of `bub run` and the jobs it schedules kept in the database (none in BUB_HOME), fired from
//! there by `bub idle`.

use crate::support;

use support::bub_env::{Env, stderr, stdout, texts};
use support::postgres;
use support::wait::WAIT;

/// Runs `sql` on the database of `url` and returns the first column of each row as text.
pub(crate) async fn query(url: &str, sql: &str) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let rows = client.simple_query(sql).await.unwrap();
    drop(client);
    let _ = driver.await;
    rows.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_owned()),
            _ => None,
        })
        .collect()
}

/// `schedule.add` of a job due in a second, in chat telegram:42, through `bub run`.
async fn schedule_pong(env: &Env) {
    let add = ",schedule.add after_seconds=1 message='say pong'";
    let out = env.run(&["run", "--session-id", "telegram:42", add]).await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn db_commands_migrate_once_and_report_the_schema() {
    let mut env = Env::cli().await;
    let out = env.run(&["db", "status"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("BUB_DATABASE_URL is not set"),
        "{}",
        stderr(&out)
    );

    env.set("BUB_DATABASE_URL", "mysql://bub:hunter2@db/bub");
    let out = env.run(&["db", "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("BUB_DATABASE_URL"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("hunter2"),
        "the password is never shown"
    );

    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    let out = env.run(&["db", "status"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let status = stdout(&out);
    assert!(status.contains("schema version 0"), "{status}");
    assert!(status.contains("pending  #1 tapes"), "{status}");
    assert!(status.contains("pending  #2 jobs"), "{status}");

    let out = env.run(&["db", "migrate"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("applied #1, #2"), "{}", stdout(&out));
    let out = env.run(&["db", "migrate"]).await;
    assert!(stdout(&out).contains("up to date"), "{}", stdout(&out));
    let status = stdout(&env.run(&["db", "status"]).await);
    assert!(status.contains("applied  #1 tapes"), "{status}");
    assert!(!status.contains("pending"), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tapes_live_in_the_database_and_a_newer_schema_stops_bub() {
    let mut env = Env::cli().await;
    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);

    // The first command migrates by itself; the conversation is kept in the database.
    env.model.push_text("Nice to meet you, Ann.");
    let out = env.run(&["run", "my name is Ann"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    env.model.push_text("Your name is Ann.");
    let out = env.run(&["run", "what is my name?"]).await;
    assert_eq!(stdout(&out).trim(), "Your name is Ann.");
    let second = &env.model.requests()[1];
    let said = second.to_string();
    assert!(
        said.contains("my name is Ann") && said.contains("Nice to meet you, Ann."),
        "{said}"
    );
    assert!(
        env.tape_paths().is_empty(),
        "no tape file: {:?}",
        env.tape_paths()
    );
    let kinds = query(&url, "SELECT kind FROM bub_tape_entries ORDER BY tape, id").await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "anchor").count(),
        1,
        "{kinds:?}"
    );
    let messages = query(
        &url,
        "SELECT payload FROM bub_tape_entries WHERE kind = 'message' ORDER BY id",
    )
    .await;
    assert!(
        messages.iter().any(|m| m.contains("what is my name?")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("Your name is Ann.")),
        "{messages:?}"
    );

    // A replica of an older Bub does not write into a schema it does not know.
    query(
        &url,
        "INSERT INTO bub_migrations (version, name) VALUES (1000, 'future')",
    )
    .await;
    let before = env.model.requests().len();
    let out = env.run(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("BUB_DATABASE_URL"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("version 1000"), "{}", stderr(&out));
    assert_eq!(env.model.requests().len(), before, "no model call");
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_live_in_the_database_and_fire_from_there() {
    let mut env = Env::new().await;
    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    schedule_pong(&env).await;
    assert!(!env.home.join("jobs.json").exists(), "no jobs file");
    let stored = query(&url, "SELECT job FROM bub_jobs").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].contains("say pong"), "{stored:?}");
    let listed = stdout(&env.run(&["jobs", "list"]).await);
    assert!(
        listed.contains("say pong") && listed.contains("telegram:42"),
        "{listed}"
    );

    env.model.push_text("pong");
    let idle = env.spawn(&["idle"]);
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["pong"]);
    let done = async {
        while !query(&url, "SELECT id FROM bub_jobs").await.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(WAIT, done)
        .await
        .expect("the one-shot job removed in time");
    assert!(idle.stop().await.success());
    assert_eq!(env.model.request_count(), 1, "fired once");
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_runs_the_jobs_and_another_takes_over_when_it_dies() {
    let mut env = Env::new().await;
    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    let first = env.spawn(&["idle"]);
    first.wait_for_log("scheduler.owner").await;
    // A second replica: another BUB_HOME, the same database.
    let other_home = env.home.with_file_name("home-2");
    env.set("BUB_HOME", &other_home.display().to_string());
    let second = env.spawn(&["idle"]);
    second.wait_for_log("scheduler.standby").await;
    assert!(
        !second.log().contains("scheduler.owner"),
        "{}",
        second.log()
    );

    // The owner dies: the database frees its lock, the other replica takes over.
    let killed = std::time::Instant::now();
    first.kill().await;
    second.wait_for_log("scheduler.owner").await;
    let failover = killed.elapsed();
    eprintln!("scheduler failover after SIGKILL: {failover:?}");
    assert!(
        failover < std::time::Duration::from_secs(30),
        "{failover:?}"
    );

    // And runs what is due.
    env.model.push_text("pong");
    schedule_pong(&env).await;
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["pong"]);
    assert!(second.stop().await.success());
    assert_eq!(env.model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_status_lists_the_replicas_on_the_database() {
    let mut env = Env::new().await;
    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    let first = env.start();
    first.wait_for_log("telegram.start").await;
    let first_home = env.home.display().to_string();
    env.set(
        "BUB_HOME",
        &env.home.with_file_name("home-2").display().to_string(),
    );
    let second = env.start();
    second.wait_for_log("telegram.start").await;

    env.set("BUB_HOME", &first_home);
    let out = env.run(&["status"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("replicas (2):"), "{text}");
    assert_eq!(text.matches("  message  host ").count(), 2, "{text}");
    assert!(
        text.contains("heartbeat 0 s ago") || text.contains("heartbeat 1 s ago"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&env.run(&["status", "--json"]).await)).unwrap();
    let replicas = json["replicas"].as_array().expect("replicas in the JSON");
    assert_eq!(replicas.len(), 2);
    assert!(
        replicas
            .iter()
            .all(|r| r["role"] == "message" && r["pid"].as_i64() > Some(0))
    );

    // A replica that stops removes its row.
    assert!(second.stop().await.success());
    let text = stdout(&env.run(&["status"]).await);
    assert!(text.contains("replicas (1):"), "{text}");
    assert!(first.stop().await.success());
    assert!(query(&url, "SELECT id FROM bub_replicas").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_db_import_moves_a_one_box_history_into_the_database_once() {
    let mut env = Env::new().await;
    // A one-box Bub: a conversation, a reset that archived it, another message, a job.
    env.model.push_text("Nice to meet you, Ann.");
    assert!(env.run(&["run", "my name is Ann"]).await.status.success());
    assert!(
        env.run(&["run", ",tape.reset archive=true"])
            .await
            .status
            .success()
    );
    env.model.push_text("Noted: blue.");
    assert!(
        env.run(&["run", "my favourite colour is blue"])
            .await
            .status
            .success()
    );
    schedule_pong(&env).await;
    let remember = ",memory.remember text='likes green tea'";
    assert!(env.run(&["run", remember]).await.status.success());
    // The chat's tape, its archive, and the tape of the session the job was added in.
    assert_eq!(env.tape_paths().len(), 3, "{:?}", env.tape_paths());

    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    let out = env.run(&["db", "import"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains(": 3 tapes ("), "{said}");
    assert!(said.contains("1 jobs added, 1 documents added"), "{said}");
    assert!(
        said.contains("usage rows added") && !said.contains(", 0 usage rows added"),
        "{said}"
    );
    let entries = env.tape_entries().len();
    assert!(
        said.contains(&format!("({entries} entries, {entries} added)")),
        "{said}"
    );
    let again = stdout(&env.run(&["db", "import"]).await);
    assert!(
        again.contains(&format!(
            "({entries} entries, 0 added), 0 jobs added, 0 documents added (pairings, memory), \
             0 usage rows added"
        )),
        "{again}"
    );
    // Memory is the database's now: the box's files are not read.
    std::fs::remove_dir_all(env.home.join("memory")).unwrap();
    let memory = stdout(&env.run(&["memory", "list"]).await);
    assert!(memory.contains("  - likes green tea"), "{memory}");
    assert!(memory.contains("in the database"), "{memory}");
    let names = query(&url, "SELECT name FROM bub_tapes ORDER BY name").await;
    assert_eq!(names.len(), 3, "{names:?}");
    let archived = |n: &String| names.iter().any(|m| n.starts_with(&format!("{m}.")));
    assert_eq!(
        names.iter().filter(|n| archived(n)).count(),
        1,
        "one archive: {names:?}"
    );

    // The conversation goes on from the database, with what was said on the box.
    env.model.push_text("Blue.");
    let out = env.run(&["run", "what is my favourite colour?"]).await;
    assert_eq!(stdout(&out).trim(), "Blue.");
    let last = env.model.requests().last().unwrap().to_string();
    assert!(last.contains("my favourite colour is blue"), "{last}");
    assert!(
        !last.contains("my name is Ann"),
        "the archived part stays archived"
    );
    let listed = stdout(&env.run(&["jobs", "list"]).await);
    assert!(listed.contains("say pong"), "{listed}");
    // The usage ledger too: the box's calls and the one made from the database.
    std::fs::remove_file(env.home.join("usage.jsonl")).unwrap();
    let usage: serde_json::Value =
        serde_json::from_str(&stdout(&env.run(&["usage", "--json"]).await)).unwrap();
    assert_eq!(usage["total"]["calls"], 3, "{usage}");
}
