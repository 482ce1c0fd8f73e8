//! docker-compose.yml and the Dockerfiles against the binaries and each other.

use super::*;

#[test]
fn compose_file_lines_up_with_the_binaries() {
    let serve = coordinator_serve();
    let work = worker();
    let compose: Value =
        serde_yaml::from_str(&read("docker-compose.yml")).expect("docker-compose.yml parses");
    assert_eq!(
        str_of(s(&compose, &["version"])),
        "2.4",
        "the 2.4 format is what docker-compose v1.29 and v2 both take"
    );
    let services = s(&compose, &["services"]).as_mapping().expect("services");
    assert_eq!(services.len(), 2, "exactly coordinator and worker");
    let coord = s(&compose, &["services", "coordinator"]);
    let wk = s(&compose, &["services", "worker"]);

    for (name, svc) in [("coordinator", coord), ("worker", wk)] {
        assert_eq!(str_of(s(svc, &["pull_policy"])), "build", "{name}: nothing may be pulled");
        let image = str_of(s(svc, &["image"]));
        assert!(
            compose_default(&image).starts_with(&format!("nqueens-{name}:")),
            "{name}: image {image}"
        );
        let dockerfile = str_of(s(svc, &["build", "dockerfile"]));
        assert!(
            deploy_dir().join("docker").join(&dockerfile).exists(),
            "{name}: deploy/docker/{dockerfile} missing"
        );
        assert_eq!(
            str_of(s(svc, &["restart"])),
            "on-failure",
            "{name}: a clean finish (exit 0) must not be restarted"
        );
    }

    // Coordinator: the serve subcommand, its env, its ports and its state on the named volume.
    assert_eq!(str_list(s(coord, &["command"])), vec!["serve".to_owned()]);
    let env = s(coord, &["environment"]).as_mapping().expect("coordinator environment is a map");
    let env: BTreeMap<String, String> =
        env.iter().map(|(k, v)| (str_of(k), compose_default(&str_of(v)))).collect();
    let bad = unknown_envs(env.keys().map(String::as_str), &serve);
    assert!(
        bad.is_empty(),
        "coordinator sets {bad:?}, which `serve` does not accept ({:?})",
        serve.envs
    );
    for need in SERVE_ENVS {
        assert!(env.contains_key(need), "coordinator does not set {need}");
    }
    let grpc = port_of(&env[GRPC_LISTEN_ENV]);
    let http = port_of(&env[HTTP_LISTEN_ENV]);
    assert_eq!((grpc, http), (7447, 9447), "the documented default ports");
    let published: BTreeSet<u16> = str_list(s(coord, &["ports"]))
        .iter()
        .map(|p| {
            p.rsplit(':')
                .next()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .parse()
                .expect("container port")
        })
        .collect();
    assert_eq!(published, BTreeSet::from([grpc, http]), "published container ports");
    let state = &env["NQ_STATE"];
    let volumes = str_list(s(coord, &["volumes"]));
    let state_mount = volumes
        .iter()
        .find_map(|v| {
            v.split_once(':')
                .filter(|(_, dir)| state.starts_with(&format!("{}/", dir.trim_end_matches('/'))))
        })
        .unwrap_or_else(|| panic!("NQ_STATE={state} is not on a volume ({volumes:?})"));
    assert!(
        s(&compose, &["volumes"]).get(state_mount.0).is_some(),
        "the state volume {} must be a named volume (so `down` + `up` resumes)",
        state_mount.0
    );
    let hc = str_list(s(coord, &["healthcheck", "test"]));
    assert_eq!(hc[0], "CMD", "exec-form healthcheck (the image has no shell)");
    assert_eq!(hc[1], "/usr/local/bin/nqueens-coordinator");
    check_invocation("nqueens-coordinator", &hc[2..], "compose healthcheck");
    assert_eq!(port_of(&hc[hc.len() - 1]), grpc, "healthcheck port");

    // Worker: its env, and NQ_CONNECT pointing at the coordinator service's gRPC port.
    let wenv = s(wk, &["environment"]).as_mapping().expect("worker environment is a map");
    let wenv: BTreeMap<String, String> =
        wenv.iter().map(|(k, v)| (str_of(k), compose_default(&str_of(v)))).collect();
    let bad = unknown_envs(wenv.keys().map(String::as_str), &work);
    assert!(
        bad.is_empty(),
        "worker sets {bad:?}, which nqueens-worker does not accept ({:?})",
        work.envs
    );
    assert_eq!(host_port(&wenv["NQ_CONNECT"]), ("coordinator".to_owned(), grpc));
    assert_eq!(wenv["NQ_TOKEN"], env["NQ_TOKEN"], "both sides default to the same token");
    assert_eq!(str_of(s(wk, &["depends_on", "coordinator", "condition"])), "service_healthy");
}

#[test]
fn dockerfiles_are_scratch_nonroot_and_use_real_flags() {
    let serve = coordinator_serve();
    let passwd = read("docker/passwd");
    for (file, bin) in [
        ("docker/coordinator.Dockerfile", "nqueens-coordinator"),
        ("docker/worker.Dockerfile", "nqueens-worker"),
    ] {
        let text = read(file);
        let lines: Vec<String> = text
            .replace("\\\n", " ")
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        let from: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
        assert_eq!(from.len(), 1, "{file}: one stage");
        assert_eq!(from[0].as_str(), "FROM scratch", "{file}: nothing to pull");
        let user = lines
            .iter()
            .find_map(|l| l.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: no USER"));
        let uid = user.split(':').next().unwrap();
        assert_ne!(uid, "0", "{file}: non-root");
        assert!(
            passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
            "{file}: uid {uid} is not in docker/passwd"
        );
        let entry = lines.iter().find_map(|l| l.strip_prefix("ENTRYPOINT ")).expect("ENTRYPOINT");
        let entry: Vec<String> = serde_json::from_str(entry).expect("exec-form ENTRYPOINT");
        assert_eq!(entry, vec![format!("/usr/local/bin/{bin}")]);
        if bin == "nqueens-coordinator" {
            let cmd: Vec<String> = serde_json::from_str(
                lines.iter().find_map(|l| l.strip_prefix("CMD ")).expect("CMD"),
            )
            .unwrap();
            assert_eq!(cmd, vec!["serve".to_owned()]);
            let hc = lines.iter().find(|l| l.starts_with("HEALTHCHECK ")).expect("HEALTHCHECK");
            let json = &hc[hc.find("CMD [").expect("exec-form HEALTHCHECK") + 4..];
            let hc: Vec<String> = serde_json::from_str(json).expect("HEALTHCHECK CMD is JSON");
            assert_eq!(hc[0], "/usr/local/bin/nqueens-coordinator");
            check_invocation(bin, &hc[1..], file);
            let expose: BTreeSet<u16> = lines
                .iter()
                .filter_map(|l| l.strip_prefix("EXPOSE "))
                .flat_map(|l| l.split_whitespace().map(|p| p.parse::<u16>().unwrap()))
                .collect();
            assert_eq!(expose, BTreeSet::from([7447, 9447]), "{file}: EXPOSE");
            for l in lines.iter().filter(|l| l.starts_with("ENV ")) {
                let keys =
                    l[4..].split_whitespace().filter_map(|kv| kv.split_once('=').map(|(k, _)| k));
                let bad = unknown_envs(keys, &serve);
                assert!(bad.is_empty(), "{file}: ENV {bad:?} not accepted by serve");
            }
        }
    }
}
