"""Generates a Python client from the real server's /openapi.json with openapi-python-client
and makes real calls with it: create a terminal, run a command in it, find it in the list,
close it. What a user of an API tool's generated client does first.

Run by the Rust test `suite::web::a_client_generated_from_openapi_makes_real_calls` with
PTYHUB_URL and PTYHUB_TOKEN; exits non-zero with what went wrong.
"""

import json
import os
import subprocess
import sys
import tempfile
import urllib.request


def fetch_spec(url: str, token: str) -> dict:
    request = urllib.request.Request(
        f"{url}/openapi.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def check(condition: bool, what: str) -> None:
    if not condition:
        print(f"failed: {what}", file=sys.stderr)
        sys.exit(1)


def main() -> int:
    url, token = os.environ["PTYHUB_URL"], os.environ["PTYHUB_TOKEN"]
    spec = fetch_spec(url, token)
    with tempfile.TemporaryDirectory() as scratch:
        spec_path = os.path.join(scratch, "openapi.json")
        with open(spec_path, "w", encoding="utf-8") as file:
            json.dump(spec, file)
        generated = subprocess.run(
            ["openapi-python-client", "generate", "--path", spec_path, "--meta", "none"],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=300,
        )
        check(generated.returncode == 0, f"generate: {generated.stdout}{generated.stderr}")
        # A warning means a part of the document the generator could not use.
        check("Warning" not in generated.stdout, f"generate warned: {generated.stdout}")
        sys.path.insert(0, scratch)
        from ptyhub_client import AuthenticatedClient  # noqa: PLC0415
        from ptyhub_client.api.v2 import v2_close, v2_create, v2_exec, v2_list  # noqa: PLC0415
        from ptyhub_client.models import CreateSessionParams, ExecParams  # noqa: PLC0415

        client = AuthenticatedClient(base_url=url, token=token, raise_on_unexpected_status=True)
        with client as client:
            created = v2_create.sync(client=client, body=CreateSessionParams(cwd="/tmp"))
            check(getattr(created, "success", False), f"create: {created!r}")
            session_id = created.data.session_id
            ran = v2_exec.sync(
                session_id, client=client, body=ExecParams(command="echo generated-$((6*7))")
            )
            check(getattr(ran, "success", False), f"exec: {ran!r}")
            check(ran.data.output == "generated-42", f"exec output: {ran.data.output!r}")
            check(ran.data.exit_code == 0, f"exec exit code: {ran.data.exit_code!r}")
            listed = v2_list.sync(client=client)
            ids = [session.session_id for session in listed.data.sessions]
            check(session_id in ids, f"list: {ids!r}")
            closed = v2_close.sync(session_id, client=client)
            check(getattr(closed, "success", False), f"close: {closed!r}")
            after = v2_list.sync(client=client)
            check(
                session_id not in [s.session_id for s in after.data.sessions],
                "closed terminal still listed",
            )
    print(f"generated client: create, exec, list and close against {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
