//! The stages' semantics, with hooks that record what they were asked.

use std::sync::Mutex;

use super::*;

/// A hook that answers the stages it is given and records every call, in order, into a log
/// shared by the hooks of one test.
#[derive(Default)]
struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
    session: Option<&'static str>,
    prompt: Option<Prompt>,
    model: Option<&'static str>,
    fail_load: bool,
    replies: Vec<&'static str>,
    panic_on_error: bool,
}

impl Recorder {
    fn note(&self, what: impl std::fmt::Display) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.{what}", self.name));
    }
}

#[async_trait]
impl Hooks for Recorder {
    async fn resolve_session(&self, _: &TurnRequest) -> Option<SessionId> {
        self.note("resolve_session");
        self.session.map(SessionId::from)
    }

    async fn load_state(
        &self,
        session: &SessionId,
        _: &TurnRequest,
        _: &mut State,
    ) -> Result<(), TurnError> {
        self.note(format!("load_state({session})"));
        match self.fail_load {
            true => Err(TurnError::Tape("disk full".into())),
            false => Ok(()),
        }
    }

    async fn build_prompt(&self, _: &mut TurnInput, _: &State) -> Option<Prompt> {
        self.note("build_prompt");
        self.prompt.clone()
    }

    async fn run_model(&self, _: &Prompt, _: &mut State) -> Option<ModelOutput> {
        self.note("run_model");
        self.model.map(|text| ModelOutput {
            visible_text: text.to_owned(),
            steps: 1,
            ..Default::default()
        })
    }

    async fn save_state(
        &self,
        _: &SessionId,
        _: &mut State,
        _: Option<&Prompt>,
        output: Option<&ModelOutput>,
    ) {
        self.note(format!("save_state({})", output.is_some()));
    }

    async fn render_outbound(&self, _: &TurnRequest, result: &TurnResult) -> Vec<Reply> {
        self.note("render_outbound");
        self.replies
            .iter()
            .map(|r| Reply {
                text: format!("{r}: {}", result.assistant_output),
            })
            .collect()
    }

    async fn dispatch_outbound(&self, _: &TurnRequest, reply: &Reply) -> bool {
        self.note(format!("dispatch({})", reply.text));
        true
    }

    async fn on_error(&self, stage: Stage, error: &TurnError, _: &TurnRequest) {
        self.note(format!("on_error({stage:?}, {error})"));
        if self.panic_on_error {
            panic!("an observer that fails");
        }
    }
}

fn request() -> TurnRequest {
    TurnRequest::asked(
        SessionId::from("telegram:1"),
        TurnInput::text("hello"),
        Authority::terminal(),
    )
}

fn model_prompt() -> Option<Prompt> {
    Some(Prompt::Model {
        text: "hello".into(),
        images: Vec::new(),
        shown: String::new(),
    })
}

#[tokio::test]
async fn first_result_stages_stop_at_the_first_answer_and_broadcasts_reach_everyone() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let plugin = Recorder {
        name: "plugin",
        log: log.clone(),
        session: Some("telegram:shared"),
        model: Some("from the plugin"),
        replies: vec!["plugin"],
        ..Default::default()
    };
    let builtin = Recorder {
        name: "builtin",
        log: log.clone(),
        session: Some("telegram:1"),
        prompt: model_prompt(),
        model: Some("from the builtin"),
        replies: vec!["builtin"],
        ..Default::default()
    };
    let result = process(&[&plugin, &builtin], request()).await;
    assert_eq!(result.assistant_output, "from the plugin");
    assert_eq!(result.error, None);
    // Every implementation's replies, in order, are the result's.
    assert_eq!(
        result.reply_text(),
        "plugin: from the plugin\n\nbuiltin: from the plugin"
    );
    assert_eq!(
        *log.lock().unwrap(),
        [
            // First result: the plugin's session wins, the built-in is not asked.
            "plugin.resolve_session",
            // Broadcast, the built-in first: the plugin's state is laid over it.
            "builtin.load_state(telegram:shared)",
            "plugin.load_state(telegram:shared)",
            // The plugin declines the prompt, the built-in builds it.
            "plugin.build_prompt",
            "builtin.build_prompt",
            // The plugin runs the model: the built-in's loop never runs.
            "plugin.run_model",
            "plugin.save_state(true)",
            "builtin.save_state(true)",
            "plugin.render_outbound",
            "builtin.render_outbound",
            // Each reply goes to every dispatcher.
            "plugin.dispatch(plugin: from the plugin)",
            "builtin.dispatch(plugin: from the plugin)",
            "plugin.dispatch(builtin: from the plugin)",
            "builtin.dispatch(builtin: from the plugin)",
        ]
    );
}

#[tokio::test]
async fn save_state_runs_when_a_stage_fails_and_a_failing_observer_breaks_nothing() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let observer = Recorder {
        name: "observer",
        log: log.clone(),
        panic_on_error: true,
        ..Default::default()
    };
    let builtin = Recorder {
        name: "builtin",
        log: log.clone(),
        fail_load: true,
        prompt: model_prompt(),
        model: Some("never"),
        ..Default::default()
    };
    let result = process(&[&observer, &builtin], request()).await;
    assert_eq!(result.error, Some(TurnError::Tape("disk full".into())));
    assert_eq!(result.assistant_output, "");
    let log = log.lock().unwrap();
    // Without a session from any hook, the request's is used.
    assert!(log.contains(&"builtin.load_state(telegram:1)".to_owned()));
    assert!(
        !log.iter()
            .any(|l| l.ends_with("build_prompt") || l.ends_with("run_model"))
    );
    assert!(log.contains(&"observer.save_state(false)".to_owned()));
    assert!(log.contains(&"builtin.save_state(false)".to_owned()));
    // The first observer panicked; the next was still told, and the turn still rendered.
    assert!(log.contains(&"observer.on_error(LoadState, disk full)".to_owned()));
    assert!(log.contains(&"builtin.on_error(LoadState, disk full)".to_owned()));
    assert!(log.contains(&"builtin.render_outbound".to_owned()));
}

#[tokio::test]
async fn a_command_is_answered_without_the_model_and_a_model_error_is_observed() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let command = Recorder {
        name: "builtin",
        log: log.clone(),
        prompt: Some(Prompt::Answered {
            output: "ran ,help".into(),
            exit: false,
        }),
        model: Some("never"),
        ..Default::default()
    };
    let result = process(&[&command], request()).await;
    assert_eq!(result.immediate_output, "ran ,help");
    assert!(!log.lock().unwrap().iter().any(|l| l.ends_with("run_model")));

    // Nobody runs the model: the turn fails at that stage, and save_state still runs.
    log.lock().unwrap().clear();
    let silent = Recorder {
        name: "builtin",
        log: log.clone(),
        prompt: model_prompt(),
        ..Default::default()
    };
    let result = process(&[&silent], request()).await;
    assert!(matches!(result.error, Some(TurnError::Model(_))));
    let log = log.lock().unwrap();
    assert!(log.contains(&"builtin.save_state(false)".to_owned()));
    assert!(
        log.iter()
            .any(|l| l.starts_with("builtin.on_error(RunModel"))
    );
}
