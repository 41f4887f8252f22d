"""Fetches /openapi.json from the real server and validates it as OpenAPI 3.1 with
openapi-spec-validator, the validator API tools and client generators use.

Run by the Rust test `suite::web::openapi_json_validates_as_openapi_3_1` with PTYHUB_URL and
PTYHUB_TOKEN; exits non-zero with every error the validator found.
"""

import json
import os
import sys
import urllib.request

from openapi_spec_validator import OpenAPIV31SpecValidator


def main() -> int:
    request = urllib.request.Request(
        f"{os.environ['PTYHUB_URL']}/openapi.json",
        headers={"Authorization": f"Bearer {os.environ['PTYHUB_TOKEN']}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        spec = json.load(response)
    if not str(spec.get("openapi", "")).startswith("3.1"):
        print(f"not OpenAPI 3.1: {spec.get('openapi')!r}", file=sys.stderr)
        return 1
    errors = list(OpenAPIV31SpecValidator(spec).iter_errors())
    for error in errors:
        where = "/".join(str(part) for part in error.absolute_path)
        print(f"{where}: {error.message}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} validation errors", file=sys.stderr)
        return 1
    print(f"openapi: valid ({len(spec['paths'])} paths)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
