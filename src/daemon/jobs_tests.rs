//! The agent's side of a job's turn: the run keeps nothing (no session, no other workspace's
//! runtime) after it, and its `schedule.run` lands on the tape of the job's workspace.

use super::*;
use crate::config::Settings;
use crate::scheduler::job::Trigger;

fn job_run(session: &str, workspace: &std::path::Path) -> JobRun {
    job_running(session, workspace, ",tape.info")
}

/// The run of a job created in `workspace` whose message is `message`.
fn job_running(session: &str, workspace: &std::path::Path, message: &str) -> JobRun {
    let now = Utc::now();
    let job = Job {
        id: "0badf00d".into(),
        session: session.into(),
        message: message.into(),
        workspace: workspace.to_path_buf(),
        trigger: Trigger::Once { at: now },
        created: now,
        next_run: None,
        last_run: None,
        last_status: None,
        creator: Some(Authority::terminal()),
    };
    JobRun {
        seq: 0,
        job: job.id.clone(),
        session: job.session.as_str().into(),
        workspace: job.workspace.clone(),
        due: now,
        prompt: scheduled_prompt(&job, now),
        creator: job.recorded_authority(),
        interrupted: false,
        deliver_to: None,
        subagent: None,
        reports: None,
    }
}

#[tokio::test]
async fn a_job_keeps_no_session_or_runtime_after_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, other) = (dir.path().join("ws"), dir.path().join("other"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let settings = Settings::with_defaults(dir.path().join("home"), ws.clone());
    let agent = AgentRuntime::new(settings, Vec::new());

    for (session, workspace) in [("cli", &ws), ("cli:2", &other), ("cli", &other)] {
        let job = job_run(session, workspace);
        let result = run(&agent, &job, TurnOutput::default()).await.unwrap();
        assert!(result.immediate_output.contains("entries"), "{result:?}");
        ran(&agent, &job, json!({"job": job.job})).await;
        assert_eq!(agent.open_sessions(), 0, "{session} in {workspace:?}");
        assert_eq!(agent.other_runtimes(), 0, "{session} in {workspace:?}");
    }
    // The runs are on the tapes of their workspaces all the same.
    let tapes: Vec<_> = std::fs::read_dir(dir.path().join("home/tapes"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(tapes.len(), 3, "one tape per (workspace, session)");
    assert!(tapes.iter().all(|t| t.contains("schedule.run")));
}

/// A job created in another workspace runs in that workspace: its files and its project
/// skills, not those of the process's own workspace (whose settings are never changed).
#[tokio::test]
async fn a_job_of_another_workspace_sees_that_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, other) = (dir.path().join("ws"), dir.path().join("other"));
    for (workspace, name) in [(&ws, "ws-skill"), (&other, "other-skill")] {
        let skill = workspace.join(".agents/skills").join(name);
        std::fs::create_dir_all(&skill).unwrap();
        let text = format!("---\nname: {name}\ndescription: a skill of {name}\n---\nbody\n");
        std::fs::write(skill.join("SKILL.md"), text).unwrap();
        std::fs::write(workspace.join("note.txt"), name).unwrap();
    }
    let settings = Settings::with_defaults(dir.path().join("home"), ws.clone());
    let agent = AgentRuntime::new(settings, Vec::new());

    let output = |message: &str, workspace: &std::path::Path| {
        let job = job_running("cli", workspace, message);
        let agent = &agent;
        async move {
            let result = run(agent, &job, TurnOutput::default()).await.unwrap();
            ran(agent, &job, json!({"job": job.job})).await;
            result.immediate_output
        }
    };
    let listed = output(",skills.list", &other).await;
    assert!(listed.contains("other-skill"), "{listed}");
    assert!(!listed.contains("ws-skill"), "{listed}");
    let read = output(",fs.read path=note.txt", &other).await;
    assert!(read.contains("other-skill"), "{read}");
    let listed = output(",skills.list", &ws).await;
    assert!(
        listed.contains("ws-skill") && !listed.contains("other-skill"),
        "{listed}"
    );
    assert_eq!(
        agent.settings().workspace,
        ws,
        "the settings keep their workspace"
    );
}
