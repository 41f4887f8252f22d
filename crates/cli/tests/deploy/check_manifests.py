"""Validates deploy/ offline: the built-in kinds against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails), the Sandbox against the subset of its
CRD's schema in deploy/sandbox.schema.json (jsonschema), the Sandbox's pod template and claim
templates against the core Pod and PersistentVolumeClaim schemas, what the files must agree
on (volumes, ports, probes, the token's Secret), and the router's nginx.conf with `nginx -t`.

Environment: DEPLOY_DIR (the repository's deploy/), NGINX_BIN (the nginx executable).
"""

import copy
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import kubernetes_validate
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from router_files import router_files  # noqa: E402

KUBERNETES_VERSION = "1.33.0"
DEPLOY = pathlib.Path(os.environ["DEPLOY_DIR"])
SANDBOX_PORT = 8888  # Where agent-sandbox's router looks for a sandbox's server.

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    if not condition:
        failures.append(what)


def k8s_validate(doc: dict, where: str) -> None:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        failures.append(f"{where}: {error.message} at {list(error.path)}")


def documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def check_sandbox(name: str, sandbox: dict, secrets: set[str], validator) -> None:
    where = f"{name}: Sandbox {sandbox['metadata']['name']}"
    for error in validator.iter_errors(sandbox):
        failures.append(f"{where}: {error.message} at {list(error.absolute_path)}")
    spec = sandbox["spec"]
    template = spec["podTemplate"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": sandbox["metadata"]["name"], **template.get("metadata", {})},
           "spec": template["spec"]}
    k8s_validate(pod, f"{where}: podTemplate as a Pod")
    claims = set()
    for claim in spec.get("volumeClaimTemplates", []):
        claims.add(claim["metadata"]["name"])
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": claim["metadata"], "spec": claim["spec"]}
        k8s_validate(pvc, f"{where}: volumeClaimTemplate {claim['metadata']['name']}")
    check(spec.get("service") is True,
          f"{where}: spec.service must be true (the router reaches the sandbox by its Service)")
    volumes = {v["name"] for v in template["spec"].get("volumes", [])} | claims
    [ptyhub] = [c for c in template["spec"]["containers"] if c["name"] == "ptyhub"]
    mounts = {m["name"]: m["mountPath"] for m in ptyhub.get("volumeMounts", [])}
    for mount in mounts:
        check(mount in volumes, f"{where}: volumeMount {mount} names no volume or claim")
    args = ptyhub["args"]
    check(args[0] == "serve", f"{where}: the container runs ptyhub serve")
    state = next((a.split("=", 1)[1] for a in args if a.startswith("--state-dir=")), None)
    check(state is not None and any(
        state.startswith(mounts[c] + "/") for c in claims if c in mounts),
        f"{where}: the state dir {state} must be on a claim's volume")
    check(f"--listen=0.0.0.0:{SANDBOX_PORT}" in args, f"{where}: ptyhub listens on {SANDBOX_PORT}")
    check(any(p["containerPort"] == SANDBOX_PORT for p in ptyhub["ports"]),
          f"{where}: the container declares port {SANDBOX_PORT}")
    check(ptyhub["livenessProbe"]["httpGet"]["path"] == "/healthz",
          f"{where}: liveness is /healthz")
    check(ptyhub["readinessProbe"]["httpGet"]["path"] in ("/readyz", "/healthz"),
          f"{where}: readiness is /readyz")
    env = {e["name"]: e for e in ptyhub.get("env", [])}
    token = env.get("PTYHUB_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    check(token.get("name") in secrets, f"{where}: PTYHUB_TOKEN comes from a Secret in deploy/")
    ping = int(env.get("PTYHUB_WS_PING_SECS", {}).get("value", "20"))
    check(ping < 30, f"{where}: WebSocket pings under 30 s")


def check_schema_refuses_mistakes(sandbox: dict, validator) -> None:
    """The subset schema is no rubber stamp: it refuses what the CRD refuses and typos."""
    wrong = []
    bad = copy.deepcopy(sandbox)
    bad["apiVersion"] = "agents.x-k8s.io/v1"
    wrong.append(bad)
    bad = copy.deepcopy(sandbox)
    bad["spec"]["volumeClaimTemplate"] = bad["spec"].pop("volumeClaimTemplates")
    wrong.append(bad)
    bad = copy.deepcopy(sandbox)
    bad["spec"]["operatingMode"] = "Paused"
    wrong.append(bad)
    bad = copy.deepcopy(sandbox)
    del bad["spec"]["podTemplate"]["spec"]["containers"]
    wrong.append(bad)
    bad = copy.deepcopy(sandbox)
    bad["metadata"]["name"] = "Sandbox_A"
    wrong.append(bad)
    for i, doc in enumerate(wrong):
        check(not validator.is_valid(doc), f"the Sandbox schema accepts mistake {i}")


def check_router(docs: list[tuple[str, dict]]) -> None:
    files = router_files(DEPLOY)
    locations = files["ptyhub-locations.conf"]
    check("proxy_set_header Upgrade $http_upgrade;" in locations, "router: WebSocket upgrade")
    reads = [int(s) for s in re.findall(r"proxy_read_timeout (\d+)s;", locations)]
    check(min(reads) < 30, "router: a WebSocket leg's read timeout under 30 s")
    check(f":{SANDBOX_PORT}\"" in files["nginx.conf"], f"router: sandboxes on port {SANDBOX_PORT}")
    check("$http_x_sandbox_id" in files["nginx.conf"], "router: routes by X-Sandbox-ID")
    # nginx itself reads the configuration (the cluster's resolver replaced by one this
    # machine has; paths moved into a temporary directory).
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "ptyhub").mkdir()
        for name, text in files.items():
            (tmp / "ptyhub" / name).write_text(text)
        conf = files["nginx.conf"]
        conf = re.sub(r"resolver \S+", "resolver 127.0.0.1", conf)
        conf = conf.replace("/tmp/", f"{tmp}/").replace("/etc/nginx/ptyhub/", f"{tmp}/ptyhub/")
        (tmp / "nginx.conf").write_text(conf)
        # nginx reads a variable named NGINX itself (inherited sockets): not passed on.
        env = {k: v for k, v in os.environ.items() if k != "NGINX"}
        result = subprocess.run(
            [os.environ.get("NGINX_BIN", "nginx"), "-t", "-q", "-p", str(tmp), "-e", "stderr",
             "-c", str(tmp / "nginx.conf")], capture_output=True, text=True, env=env)
        check(result.returncode == 0, f"router: nginx -t: {result.stderr}")


def main() -> None:
    docs = documents()
    schema = json.loads((DEPLOY / "sandbox.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    secrets = {d["metadata"]["name"] for _, d in docs if d["kind"] == "Secret"}
    kinds = []
    for name, doc in docs:
        kinds.append(doc["kind"])
        if doc["kind"] == "Sandbox":
            check_sandbox(name, doc, secrets, validator)
            check_schema_refuses_mistakes(doc, validator)
        else:
            k8s_validate(doc, f"{name}: {doc['kind']} {doc['metadata']['name']}")
    for kind in ("Sandbox", "Secret", "ConfigMap", "Deployment", "Service"):
        check(kind in kinds, f"deploy/ has no {kind}")
    # kubernetes-validate is no rubber stamp either: a misspelt field fails.
    [deployment] = [d for _, d in docs if d["kind"] == "Deployment"]
    bad = copy.deepcopy(deployment)
    bad["spec"]["replica"] = bad["spec"].pop("replicas")
    try:
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
        failures.append("kubernetes-validate accepts a misspelt field")
    except kubernetes_validate.ValidationError:
        pass
    check_router(docs)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"deploy/: {len(docs)} resources valid ({', '.join(kinds)})")


if __name__ == "__main__":
    main()
