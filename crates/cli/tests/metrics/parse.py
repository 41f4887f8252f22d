"""Parses a /metrics answer (stdin) with the Prometheus project's own Python client parser and
prints its samples as JSON lines: {"name", "labels", "value", "family", "type"}. Fails when a
family lacks its help text or the ptyhub_ prefix, or when the text does not parse."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> None:
    text = sys.stdin.read()
    families = list(text_string_to_metric_families(text))
    if not families:
        sys.exit("no metric family in the answer")
    for family in families:
        if not family.name.startswith("ptyhub_"):
            sys.exit(f"{family.name}: no ptyhub_ prefix")
        if not family.documentation.strip():
            sys.exit(f"{family.name}: no help text")
        for sample in family.samples:
            print(
                json.dumps(
                    {
                        "family": family.name,
                        "type": family.type,
                        "name": sample.name,
                        "labels": sample.labels,
                        "value": sample.value,
                    }
                )
            )


if __name__ == "__main__":
    main()
