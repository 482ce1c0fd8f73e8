//! The Kubernetes manifests (Services, StatefulSet, Deployment, Secret) against the binaries and
//! each other.

use super::*;
use serde::Deserialize as _;

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
    let docs = k8s_docs();
    let secret_keys = secret_keys(&docs);
    let sts = find(&docs, "StatefulSet", "nqueens-coordinator");
    let (pod_labels, cports) = the_coordinator_serves_on_its_ports(&docs, sts, &secret_keys);
    let svc_ports = the_service_reaches_the_coordinator(&docs, &pod_labels, &cports);
    let pspec = the_workers_spread_and_connect(&docs, &secret_keys, &svc_ports);
    for (who, p) in [("coordinator", s(sts, &["spec", "template", "spec"])), ("worker", pspec)] {
        assert_eq!(
            s(p, &["securityContext", "runAsUser"]).as_u64(),
            Some(10001),
            "{who}: the image's user"
        );
    }
}

/// The keys the token Secret holds.
fn secret_keys(docs: &[Value]) -> BTreeSet<String> {
    let secret = find(docs, "Secret", "nqueens-token");
    ["stringData", "data"]
        .iter()
        .filter_map(|k| secret.get(*k))
        .flat_map(|m| m.as_mapping().unwrap().keys().map(str_of))
        .collect()
}

/// The token comes from the Secret, in every container that needs it.
fn token_ref(env: &BTreeMap<String, Value>, who: &str, secret_keys: &BTreeSet<String>) {
    let r = s(&env["NQ_TOKEN"], &["valueFrom", "secretKeyRef"]);
    assert_eq!(str_of(s(r, &["name"])), "nqueens-token", "{who}: token Secret");
    assert!(secret_keys.contains(&str_of(s(r, &["key"]))), "{who}: key not in the Secret");
}

/// The coordinator's StatefulSet: one `serve` container with the settings serve accepts, its
/// ports those it listens on, its token from the Secret, its state on the claim. Returns the pod's
/// labels and the container's ports by name.
fn the_coordinator_serves_on_its_ports(
    docs: &[Value],
    sts: &Value,
    secret_keys: &BTreeSet<String>,
) -> (BTreeMap<String, String>, BTreeMap<String, u64>) {
    let serve = coordinator_serve();
    assert_eq!(s(sts, &["spec", "replicas"]).as_u64(), Some(1), "one coordinator");
    let headless = find(docs, "Service", &str_of(s(sts, &["spec", "serviceName"])));
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
    let (grpc, http) = (port_of(&val(GRPC_LISTEN_ENV)), port_of(&val(HTTP_LISTEN_ENV)));
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
    token_ref(&env, "coordinator", secret_keys);
    the_state_is_on_the_claim(sts, c, &val("NQ_STATE"));
    for probe in ["readinessProbe", "livenessProbe"] {
        let cmd = str_list(s(c, &[probe, "exec", "command"]));
        assert_eq!(cmd[0], "/usr/local/bin/nqueens-coordinator");
        check_invocation("nqueens-coordinator", &cmd[1..], probe);
        assert_eq!(port_of(cmd.last().unwrap()), grpc, "{probe} port");
    }
    (pod_labels, cports)
}

/// The state file (`state`, container `c`'s NQ_STATE) is on the PersistentVolumeClaim, writable
/// by the image's user.
fn the_state_is_on_the_claim(sts: &Value, c: &Value, state: &str) {
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
        state.starts_with(&format!("{}/", mount_path.trim_end_matches('/'))),
        "NQ_STATE on the PVC"
    );
    assert_eq!(
        s(sts, &["spec", "template", "spec", "securityContext", "fsGroup"]).as_u64(),
        Some(10001),
        "PVC writable by uid 10001"
    );
}

/// The client Service: selects the coordinator pod, its targetPorts are the container's ports.
/// Returns its ports by name.
fn the_service_reaches_the_coordinator(
    docs: &[Value],
    pod_labels: &BTreeMap<String, String>,
    cports: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let svc = find(docs, "Service", "nqueens-coordinator");
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
    svc_ports
}

/// Workers: one per node, CPU request = threads, connecting to the Service's gRPC port. Returns
/// the worker pod's spec.
fn the_workers_spread_and_connect<'a>(
    docs: &'a [Value],
    secret_keys: &BTreeSet<String>,
    svc_ports: &BTreeMap<String, u64>,
) -> &'a Value {
    let work = worker();
    let dep = find(docs, "Deployment", "nqueens-worker");
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
    token_ref(&wenv, "worker", secret_keys);
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
    pspec
}
