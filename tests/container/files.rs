//! The container files agree with each other: the Dockerfile, docker-compose.yml, entrypoint.sh,
//! docker/README.md and the README's Deployment section (and Cargo.toml's Rust version); the
//! shell scripts parse.

use std::process::Command;

use super::{read_repo_file, repo_file};

#[test]
fn shell_scripts_parse() {
    for script in ["entrypoint.sh", "docker/startup.sh.example"] {
        let out = Command::new("bash")
            .arg("-n")
            .arg(repo_file(script))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bash -n {script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The `## Deployment` section of README.md.
fn readme_deployment() -> String {
    let readme = read_repo_file("README.md");
    let start = readme
        .find("\n## Deployment\n")
        .expect("README.md has a ## Deployment section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

fn cargo_rust_version() -> String {
    let manifest = read_repo_file("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("rust-version"))
        .expect("Cargo.toml sets rust-version");
    line.split('=')
        .nth(1)
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_owned()
}

#[test]
fn dockerfile_compose_and_readme_agree() {
    let dockerfile = read_repo_file("Dockerfile");
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).collect();
    let has = |l: &str| lines.contains(&l);

    let builder = format!(
        "FROM rust:{}-slim-bookworm AS builder",
        cargo_rust_version()
    );
    assert!(has(&builder), "Dockerfile lacks {builder:?}");
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(has("FROM debian:bookworm-slim"));
    assert!(has("ENV BUB_HOME=/data"));
    assert!(has("VOLUME /data"));
    assert!(has("WORKDIR /workspace"));
    assert!(
        dockerfile.contains("install -m 0755 /build/target/release/bub /usr/local/bin/bub"),
        "the builder copies the binary out of the target cache"
    );
    assert!(has(
        "COPY --from=builder /usr/local/bin/bub /usr/local/bin/bub"
    ));
    assert!(has(
        "COPY --chmod=0755 entrypoint.sh /usr/local/bin/bub-entrypoint"
    ));
    assert!(has(
        r#"ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/bub-entrypoint"]"#
    ));
    for pkg in [
        "tini",
        "bash",
        "git",
        "curl",
        "ca-certificates",
        "ripgrep",
        "gh",
    ] {
        assert!(
            dockerfile.split_whitespace().any(|w| w == pkg),
            "runtime installs {pkg}"
        );
    }
    // Cargo refuses a manifest whose [[bench]] sources are missing.
    if read_repo_file("Cargo.toml").contains("[[bench]]") {
        assert!(has("COPY benches ./benches"), "benches are copied");
    }
    assert!(has("COPY src ./src"));
    // The built-in skills are compiled into the binary (include_dir!).
    assert!(has("COPY skills ./skills"), "built-in skills are copied");

    let ignore = read_repo_file(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for p in ["target", ".git", ".env"] {
        assert!(ignored.contains(&p), ".dockerignore lacks {p}");
    }
    assert!(
        ignored.contains(&"!skills/**"),
        "SKILL.md files are not caught by `*.md`"
    );
    for needed in ["src", "entrypoint.sh", "Cargo.lock", "benches", "skills"] {
        assert!(
            !ignored.contains(&needed),
            ".dockerignore excludes {needed}"
        );
    }

    let compose = read_repo_file("docker-compose.yml");
    for needle in [
        "build: .",
        "image: bub:latest",
        "env_file: .env",
        "BUB_HOME: /data",
        "restart: unless-stopped",
        "- ${BUB_WORKSPACE_PATH:-./workspace}:/workspace",
        "- ${BUB_DATA_PATH:-./data}:/data",
    ] {
        assert!(
            compose.contains(needle),
            "docker-compose.yml lacks {needle:?}"
        );
    }

    let section = readme_deployment();
    for needle in [
        "docker compose up -d --build",
        "startup.sh",
        "bub idle",
        "docker/README.md",
        "/workspace",
        "/data",
        "cargo install --path .",
        "ExecStart=",
    ] {
        assert!(
            section.contains(needle),
            "README Deployment lacks {needle:?}"
        );
    }
    let notes = read_repo_file("docker/README.md");
    for needle in [
        "startup.sh",
        "bub idle",
        "docker compose up -d",
        "docker compose logs",
    ] {
        assert!(notes.contains(needle), "docker/README.md lacks {needle:?}");
    }
}

/// The lines of `text` that are not comments, trimmed.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_account_the_healthcheck_and_the_skills_mount_agree() {
    let dockerfile = read_repo_file("Dockerfile");
    let entrypoint = read_repo_file("entrypoint.sh");
    let compose = read_repo_file("docker-compose.yml");

    // The account the entrypoint drops to is the one the image creates, with the default ids.
    for needle in [
        "groupadd --gid 1000 bub",
        "useradd --uid 1000 --gid bub --create-home --home-dir /home/bub",
        "chown bub:bub /data /workspace",
    ] {
        assert!(dockerfile.contains(needle), "Dockerfile lacks {needle:?}");
    }
    let code = code_lines(&entrypoint);
    for line in [
        "user=bub",
        "user_home=/home/bub",
        r#"puid="${PUID:-1000}""#,
        r#"pgid="${PGID:-1000}""#,
    ] {
        assert!(code.contains(&line), "entrypoint.sh lacks {line:?}");
    }
    // It starts as root, so that PUID/PGID can be applied: no USER in the image, no `user:`.
    assert!(
        !code_lines(&dockerfile)
            .iter()
            .any(|l| l.starts_with("USER ")),
        "the image must start the entrypoint as root"
    );
    assert!(!code_lines(&compose).iter().any(|l| l.starts_with("user:")));

    // The healthcheck is the entrypoint's, and cheap: at most one check every 30 s.
    assert!(
        dockerfile.contains(r#"CMD ["/usr/local/bin/bub-entrypoint", "--healthcheck"]"#),
        "Dockerfile lacks the HEALTHCHECK command"
    );
    let interval = dockerfile
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--interval="))
        .and_then(|v| v.strip_suffix('s'))
        .and_then(|v| v.parse::<u32>().ok())
        .expect("HEALTHCHECK --interval=Ns");
    assert!(interval >= 30, "a check every {interval} s");
    // Compose checks the same way, and serves /healthz for it.
    for needle in [
        r#"test: ["CMD", "/usr/local/bin/bub-entrypoint", "--healthcheck"]"#,
        "BUB_HTTP_LISTEN: ${BUB_HTTP_LISTEN:-8080}",
    ] {
        assert!(
            compose.contains(needle),
            "docker-compose.yml lacks {needle:?}"
        );
    }

    // Global skills are opt-in (commented out), and never a directory Docker creates as root.
    assert!(
        !compose.contains("/root/.agents"),
        "Bub's home is /home/bub"
    );
    let agents: Vec<&str> = compose
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(".agents") || l.contains("create_host_path"))
        .collect();
    assert!(
        agents.iter().all(|l| l.starts_with('#')),
        "the ~/.agents mount is opt-in: {agents:?}"
    );
    for needle in [
        "# - type: bind",
        "#   target: /home/bub/.agents",
        "#     create_host_path: false",
    ] {
        assert!(
            compose.contains(needle),
            "docker-compose.yml lacks {needle:?}"
        );
    }

    let notes = read_repo_file("docker/README.md");
    for needle in [
        "PUID",
        "PGID",
        "HEALTHCHECK",
        "configuration error",
        "create_host_path",
        "/home/bub/.agents",
        "docker compose exec -u bub bub bub pair approve",
    ] {
        assert!(notes.contains(needle), "docker/README.md lacks {needle:?}");
    }
}
