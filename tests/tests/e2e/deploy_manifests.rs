//! The deployment files under `deploy/` against the real binaries: every flag and `NQ_` environment
//! variable they use must be one the binaries accept (read from their `--help`), and the names,
//! ports and mounts must line up between the pieces (compose services, Kubernetes Services,
//! StatefulSet, Deployment, Secret; Dockerfiles; the Slurm script; the systemd units and their env
//! files).
//!
//! Needs the release binaries: `cargo build --release --workspace` (or `cargo test --workspace
//! --release`).

use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    let path = deploy_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// What one command line of a binary accepts: its long flags and its `NQ_` environment variables.
#[derive(Debug, Default)]
struct Accepts {
    flags: BTreeSet<String>,
    envs: BTreeSet<String>,
}

/// `BIN ARGS... --help`, parsed. The environment is cleared of `NQ_` variables so that clap shows
/// the defaults, not values that happen to be set where the test runs.
fn accepts(bin: &str, args: &[&str]) -> Accepts {
    let exe = nqueens_tests::binary(bin);
    let mut cmd = Command::new(&exe);
    cmd.args(args).arg("--help");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NQ_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{bin} {} --help` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut a = Accepts::default();
    for word in text.split(|c: char| {
        c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=' || c == '<'
    }) {
        if let Some(name) = word.strip_prefix("--") {
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                a.flags.insert(format!("--{name}"));
            }
        }
    }
    let mut rest = text.as_str();
    while let Some(i) = rest.find("env: ") {
        rest = &rest[i + 5..];
        let name: String =
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.starts_with("NQ_") {
            a.envs.insert(name);
        }
    }
    a
}

fn coordinator_serve() -> Accepts {
    let a = accepts("nqueens-coordinator", &["serve"]);
    for env in ["NQ_N", "NQ_STATE", "NQ_LISTEN", "NQ_HTTP_LISTEN", "NQ_TOKEN", "NQ_LEASE_SECONDS"] {
        assert!(
            a.envs.contains(env),
            "`nqueens-coordinator serve` does not take {env}; it takes {:?}",
            a.envs
        );
    }
    a
}

fn worker() -> Accepts {
    let a = accepts("nqueens-worker", &[]);
    for env in ["NQ_CONNECT", "NQ_TOKEN", "NQ_THREADS"] {
        assert!(a.envs.contains(env), "nqueens-worker does not take {env}; it takes {:?}", a.envs);
    }
    a
}

/// `NQ_` names among `keys` that `who` does not accept.
fn unknown_envs<'a>(keys: impl IntoIterator<Item = &'a str>, who: &Accepts) -> Vec<String> {
    keys.into_iter()
        .filter(|k| k.starts_with("NQ_") && !who.envs.contains(*k))
        .map(str::to_owned)
        .collect()
}

fn port_of(addr: &str) -> u16 {
    let port = addr.rsplit(':').next().unwrap_or_default().trim_end_matches('/');
    port.parse().unwrap_or_else(|_| panic!("no port in address {addr:?}"))
}

/// host and port of `http://host:port`.
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url).trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':').unwrap_or_else(|| panic!("no port in {url:?}"));
    (host.to_owned(), port.parse().unwrap_or_else(|_| panic!("bad port in {url:?}")))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    let mut cur = v;
    for key in path {
        cur = match cur.get(*key) {
            Some(next) => next,
            None => panic!(
                "missing {} in {}",
                path.join("."),
                serde_yaml::to_string(v).unwrap_or_default()
            ),
        };
    }
    cur
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        // compose: `KEY:` with no value passes KEY through from the caller's environment.
        Value::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_sequence().unwrap_or_else(|| panic!("not a list: {v:?}")).iter().map(str_of).collect()
}

/// The default of a `${VAR:-default}` compose substitution, or the string itself.
fn compose_default(v: &str) -> String {
    match (v.find("${"), v.find(":-")) {
        (Some(a), Some(b)) if b > a => {
            let end = v[b..].find('}').map(|e| b + e).expect("closing brace");
            format!("{}{}{}", &v[..a], &v[b + 2..end], &v[end + 1..])
        }
        _ => v.to_owned(),
    }
}

/// A `--FLAG` subcommand invocation (`args`) must use flags and a subcommand that exist.
fn check_invocation(bin: &str, args: &[String], context: &str) {
    let (sub, flags): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| !a.starts_with('-'));
    let sub_name = sub.first().map(|s| s.as_str()).unwrap_or_default();
    let help = accepts(bin, &[sub_name]);
    for f in flags {
        let name = f.split('=').next().unwrap();
        assert!(
            help.flags.contains(name),
            "{context}: `{bin} {sub_name}` has no flag {name}; it has {:?}",
            help.flags
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// docker-compose.yml and the Dockerfiles

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
    for need in ["NQ_N", "NQ_STATE", "NQ_LISTEN", "NQ_HTTP_LISTEN", "NQ_TOKEN", "NQ_LEASE_SECONDS"]
    {
        assert!(env.contains_key(need), "coordinator does not set {need}");
    }
    let grpc = port_of(&env["NQ_LISTEN"]);
    let http = port_of(&env["NQ_HTTP_LISTEN"]);
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

// ---------------------------------------------------------------------------------------------------
// Kubernetes

fn k8s_docs() -> Vec<Value> {
    let kustomization: Value =
        serde_yaml::from_str(&read("k8s/kustomization.yaml")).expect("kustomization parses");
    let mut docs = Vec::new();
    for res in str_list(s(&kustomization, &["resources"])) {
        for doc in serde_yaml::Deserializer::from_str(&read(&format!("k8s/{res}"))) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("k8s/{res}: {e}"));
            if !v.is_null() {
                assert!(
                    v.get("apiVersion").is_some() && v.get("kind").is_some(),
                    "k8s/{res}: a document without apiVersion/kind"
                );
                docs.push(v);
            }
        }
    }
    docs
}
use serde::Deserialize as _;

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| str_of(s(d, &["kind"])) == kind && str_of(s(d, &["metadata", "name"])) == name)
        .unwrap_or_else(|| panic!("no {kind} named {name}"))
}

fn env_map(container: &Value) -> BTreeMap<String, Value> {
    s(container, &["env"])
        .as_sequence()
        .expect("env list")
        .iter()
        .map(|e| (str_of(s(e, &["name"])), e.clone()))
        .collect()
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_mapping()
        .map(|m| m.iter().map(|(k, v)| (str_of(k), str_of(v))).collect())
        .unwrap_or_default()
}

#[test]
fn kubernetes_manifests_line_up() {
    let serve = coordinator_serve();
    let work = worker();
    let docs = k8s_docs();

    let secret = find(&docs, "Secret", "nqueens-token");
    let secret_keys: BTreeSet<String> = ["stringData", "data"]
        .iter()
        .filter_map(|k| secret.get(*k))
        .flat_map(|m| m.as_mapping().unwrap().keys().map(str_of))
        .collect();

    let sts = find(&docs, "StatefulSet", "nqueens-coordinator");
    assert_eq!(s(sts, &["spec", "replicas"]).as_u64(), Some(1), "one coordinator");
    let headless = find(&docs, "Service", &str_of(s(sts, &["spec", "serviceName"])));
    assert_eq!(
        str_of(s(headless, &["spec", "clusterIP"])),
        "None",
        "the StatefulSet's governing Service is headless"
    );
    let pod_labels = labels(s(sts, &["spec", "template", "metadata", "labels"]));
    assert_eq!(labels(s(sts, &["spec", "selector", "matchLabels"])), pod_labels);
    let containers = s(sts, &["spec", "template", "spec", "containers"]).as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(str_list(s(c, &["args"])), vec!["serve".to_owned()]);
    let env = env_map(c);
    let bad = unknown_envs(env.keys().map(String::as_str), &serve);
    assert!(bad.is_empty(), "StatefulSet sets {bad:?}, not accepted by serve ({:?})", serve.envs);
    let val = |k: &str| str_of(s(&env[k], &["value"]));
    let (grpc, http) = (port_of(&val("NQ_LISTEN")), port_of(&val("NQ_HTTP_LISTEN")));
    let cports: BTreeMap<String, u64> = s(c, &["ports"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (str_of(s(p, &["name"])), s(p, &["containerPort"]).as_u64().unwrap()))
        .collect();
    assert_eq!(
        cports,
        BTreeMap::from([("grpc".to_owned(), grpc as u64), ("metrics".to_owned(), http as u64)])
    );
    // The token comes from the Secret, in every container that needs it.
    let token_ref = |env: &BTreeMap<String, Value>, who: &str| {
        let r = s(&env["NQ_TOKEN"], &["valueFrom", "secretKeyRef"]);
        assert_eq!(str_of(s(r, &["name"])), "nqueens-token", "{who}: token Secret");
        assert!(secret_keys.contains(&str_of(s(r, &["key"]))), "{who}: key not in the Secret");
    };
    token_ref(&env, "coordinator");
    // The state file is on the PersistentVolumeClaim.
    let claim = &s(sts, &["spec", "volumeClaimTemplates"]).as_sequence().unwrap()[0];
    let claim_name = str_of(s(claim, &["metadata", "name"]));
    let mount = s(c, &["volumeMounts"])
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| str_of(s(m, &["name"])) == claim_name)
        .expect("the claim is mounted");
    let mount_path = str_of(s(mount, &["mountPath"]));
    assert!(
        val("NQ_STATE").starts_with(&format!("{}/", mount_path.trim_end_matches('/'))),
        "NQ_STATE on the PVC"
    );
    assert_eq!(
        s(sts, &["spec", "template", "spec", "securityContext", "fsGroup"]).as_u64(),
        Some(10001),
        "PVC writable by uid 10001"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        let cmd = str_list(s(c, &[probe, "exec", "command"]));
        assert_eq!(cmd[0], "/usr/local/bin/nqueens-coordinator");
        check_invocation("nqueens-coordinator", &cmd[1..], probe);
        assert_eq!(port_of(cmd.last().unwrap()), grpc, "{probe} port");
    }

    // The client Service: selects the coordinator pod, its targetPorts are the container's ports.
    let svc = find(&docs, "Service", "nqueens-coordinator");
    let sel = labels(s(svc, &["spec", "selector"]));
    assert!(
        sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "Service selects the coordinator pod"
    );
    let mut svc_ports = BTreeMap::new();
    for p in s(svc, &["spec", "ports"]).as_sequence().unwrap() {
        let target = str_of(s(p, &["targetPort"]));
        let container_port = cports
            .get(&target)
            .copied()
            .or_else(|| target.parse().ok())
            .expect("targetPort names a container port");
        assert_eq!(s(p, &["port"]).as_u64(), Some(container_port), "Service port = container port");
        svc_ports.insert(str_of(s(p, &["name"])), container_port);
    }

    // Workers: one per node, CPU request = threads, connecting to the Service's gRPC port.
    let dep = find(&docs, "Deployment", "nqueens-worker");
    let wlabels = labels(s(dep, &["spec", "template", "metadata", "labels"]));
    assert_eq!(labels(s(dep, &["spec", "selector", "matchLabels"])), wlabels);
    let pspec = s(dep, &["spec", "template", "spec"]);
    let anti = &s(
        pspec,
        &["affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"],
    )
    .as_sequence()
    .unwrap()[0];
    assert_eq!(str_of(s(anti, &["topologyKey"])), "kubernetes.io/hostname");
    assert_eq!(
        labels(s(anti, &["labelSelector", "matchLabels"])),
        wlabels,
        "anti-affinity against its own pods"
    );
    let spread = &s(pspec, &["topologySpreadConstraints"]).as_sequence().unwrap()[0];
    assert_eq!(str_of(s(spread, &["topologyKey"])), "kubernetes.io/hostname");
    assert_eq!(labels(s(spread, &["labelSelector", "matchLabels"])), wlabels);
    let wc = &s(pspec, &["containers"]).as_sequence().unwrap()[0];
    let wenv = env_map(wc);
    let bad = unknown_envs(wenv.keys().map(String::as_str), &work);
    assert!(
        bad.is_empty(),
        "worker Deployment sets {bad:?}, not accepted by nqueens-worker ({:?})",
        work.envs
    );
    token_ref(&wenv, "worker");
    let (host, port) = host_port(&str_of(s(&wenv["NQ_CONNECT"], &["value"])));
    assert_eq!(host, "nqueens-coordinator", "workers connect to the coordinator Service");
    assert_eq!(
        Some(port as u64),
        svc_ports.get("grpc").copied(),
        "workers connect to the gRPC port"
    );
    let threads = str_of(s(&wenv["NQ_THREADS"], &["value"]));
    let cpu = str_of(s(wc, &["resources", "requests", "cpu"]));
    assert_eq!(cpu, threads, "CPU request = cores = NQ_THREADS");
    assert!(s(wc, &["resources", "limits"]).get("cpu").is_none(), "no CPU limit: no throttling");
    for (who, p) in [("coordinator", s(sts, &["spec", "template", "spec"])), ("worker", pspec)] {
        assert_eq!(
            s(p, &["securityContext", "runAsUser"]).as_u64(),
            Some(10001),
            "{who}: the image's user"
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// Slurm and systemd

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
