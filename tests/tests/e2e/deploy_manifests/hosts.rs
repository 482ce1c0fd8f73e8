//! Plain hosts: the Slurm script and the systemd units with their env files, against the
//! binaries.

use super::*;

/// The arguments after `marker` on the (continuation-joined) lines of a shell script that contain
/// it.
fn shell_invocations(text: &str, marker: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            l.split_once(marker).map(|(_, rest)| {
                rest.split_whitespace()
                    .take_while(|w| *w != "&" && *w != "||")
                    // `${VAR:+--flag "$VAR"}`: the flag inside an optional expansion counts too.
                    .map(|w| match w.find("--") {
                        Some(i) if i > 0 && w.starts_with("${") => w[i..].to_owned(),
                        _ => w.trim_matches('"').to_owned(),
                    })
                    .collect()
            })
        })
        .collect()
}

#[test]
fn slurm_script_uses_real_flags() {
    let text = read("slurm/nqueens.sbatch");
    assert!(text.starts_with("#!"), "sbatch needs a shebang");
    assert!(text.contains("#SBATCH --ntasks-per-node=1"), "one task (one worker) per node");
    let coord = shell_invocations(&text, "\"$COORD\"");
    assert_eq!(coord.len(), 1, "one coordinator launch");
    assert_eq!(coord[0][0], "serve");
    let flag_args: Vec<String> = coord[0].iter().filter(|a| a.starts_with("--")).cloned().collect();
    check_invocation(
        "nqueens-coordinator",
        &[vec!["serve".to_owned()], flag_args.clone()].concat(),
        "sbatch coordinator",
    );
    for need in ["--state", "--n", "--exit-when-done"] {
        assert!(flag_args.iter().any(|f| f == need), "sbatch coordinator without {need}");
    }
    let work = worker();
    let wk = shell_invocations(&text, "\"$WORKER\"");
    assert_eq!(wk.len(), 1, "one worker launch");
    for f in wk[0].iter().filter(|a| a.starts_with("--")) {
        assert!(
            work.flags.contains(f),
            "sbatch worker: nqueens-worker has no flag {f} ({:?})",
            work.flags
        );
    }
    assert!(wk[0].iter().any(|f| f == "--connect"));
    // The token travels in the environment, which both programs must read.
    let serve = coordinator_serve();
    assert!(
        text.contains("export NQ_TOKEN")
            && serve.envs.contains("NQ_TOKEN")
            && work.envs.contains("NQ_TOKEN")
    );
    // It is a valid shell script.
    let status = Command::new("bash")
        .arg("-n")
        .arg(deploy_dir().join("slurm/nqueens.sbatch"))
        .status()
        .expect("bash");
    assert!(status.success(), "bash -n nqueens.sbatch");
}

/// Keys of a unit's `[Service]` section (repeated keys in order).
fn unit_keys(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('[') && l.contains('='))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect()
}

fn env_file_keys(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .filter(|l| l.starts_with("NQ_") && l.contains('='))
        .map(|l| l.split_once('=').unwrap().0.to_owned())
        .collect()
}

#[test]
fn systemd_units_use_real_flags_and_env() {
    let serve = coordinator_serve();
    let work = worker();
    for (unit, env_example, bin, accepted) in [
        (
            "systemd/nqueens-coordinator.service",
            "systemd/coordinator.env.example",
            "nqueens-coordinator",
            &serve,
        ),
        ("systemd/nqueens-worker.service", "systemd/worker.env.example", "nqueens-worker", &work),
    ] {
        let text = read(unit);
        let keys = unit_keys(&text);
        let get = |k: &str| {
            keys.iter().filter(|(key, _)| key == k).map(|(_, v)| v.clone()).collect::<Vec<_>>()
        };
        let exec = get("ExecStart");
        assert_eq!(exec.len(), 1, "{unit}: one ExecStart");
        let argv: Vec<String> = exec[0].split_whitespace().map(str::to_owned).collect();
        assert_eq!(argv[0], format!("/usr/local/bin/{bin}"), "{unit}: ExecStart");
        if bin == "nqueens-coordinator" {
            assert_eq!(argv.get(1).map(String::as_str), Some("serve"), "{unit}: serve");
            check_invocation(bin, &argv[1..], unit);
        } else {
            for f in argv[1..].iter().filter(|a| a.starts_with("--")) {
                assert!(work.flags.contains(f), "{unit}: no flag {f}");
            }
        }
        assert_eq!(
            get("Restart"),
            vec!["on-failure".to_owned()],
            "{unit}: restart on failure, not after a clean finish"
        );
        assert!(!get("RestartSec").is_empty(), "{unit}: RestartSec");
        let env_file = get("EnvironmentFile");
        assert_eq!(env_file.len(), 1, "{unit}: the token comes from an env file");
        let inline: Vec<String> = get("Environment")
            .iter()
            .filter_map(|e| e.split_once('=').map(|(k, _)| k.to_owned()))
            .collect();
        let file_keys = env_file_keys(&read(env_example));
        assert!(file_keys.iter().any(|k| k == "NQ_TOKEN"), "{env_example}: NQ_TOKEN");
        let bad = unknown_envs(inline.iter().chain(file_keys.iter()).map(String::as_str), accepted);
        assert!(
            bad.is_empty(),
            "{unit} / {env_example}: {bad:?} not accepted by {bin} ({:?})",
            accepted.envs
        );
        if bin == "nqueens-coordinator" {
            let state = inline_value(&get("Environment"), "NQ_STATE");
            let dir = get("StateDirectory");
            assert!(
                state.starts_with(&format!("/var/lib/{}/", dir[0])),
                "{unit}: NQ_STATE in the StateDirectory"
            );
        }
        systemd_analyze_verify(&deploy_dir().join(unit), bin);
    }
}

fn inline_value(envs: &[String], key: &str) -> String {
    envs.iter()
        .find_map(|e| e.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no Environment={key}="))
        .to_owned()
}

/// `systemd-analyze verify` on a copy of the unit whose ExecStart points at the built binary
/// (where systemd-analyze is installed; skipped, with a note, where it is not).
fn systemd_analyze_verify(unit: &Path, bin: &str) {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("note: systemd-analyze not installed; {} not verified by it", unit.display());
        return;
    }
    let dir = std::env::temp_dir().join(format!("nq-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(unit.file_name().unwrap());
    let text = std::fs::read_to_string(unit).unwrap();
    let exe = nqueens_tests::binary(bin);
    std::fs::write(&copy, text.replace(&format!("/usr/local/bin/{bin}"), exe.to_str().unwrap()))
        .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .env("SYSTEMD_LOG_LEVEL", "warning")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let msg =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Only complaints about the unit itself count (not about the host's own units or missing env
    // file).
    let complaints: Vec<&str> = msg
        .lines()
        .filter(|l| {
            l.contains(copy.file_name().unwrap().to_str().unwrap())
                && !l.contains("EnvironmentFile")
                && !l.contains("/etc/nqueens")
        })
        .collect();
    assert!(complaints.is_empty(), "systemd-analyze verify {}: {msg}", unit.display());
}
