"""Checks shared by the MCP client scripts: a failed check prints why and exits non-zero."""

import json
import sys


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def is_error(result):
    # The SDK's 2.x models use snake_case; 1.x used the wire's camelCase.
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def payload(result):
    """The JSON of a successful tool result."""
    check(not is_error(result), f"tool failed: {result.content}")
    return json.loads(result.content[0].text)
