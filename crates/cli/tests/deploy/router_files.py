"""The router's nginx files from deploy/router.yaml's ConfigMap, written into a directory: the
scale-out test runs a real nginx with them as they are shipped.

Usage: router_files.py DEPLOY_DIR OUT_DIR
"""

import pathlib
import sys

import yaml


def router_files(deploy_dir: pathlib.Path) -> dict[str, str]:
    """The data of the ConfigMap named ptyhub-router."""
    for doc in yaml.safe_load_all((deploy_dir / "router.yaml").read_text()):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "ptyhub-router":
            return doc["data"]
    raise SystemExit("deploy/router.yaml has no ConfigMap ptyhub-router")


def main() -> None:
    deploy_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in router_files(deploy_dir).items():
        (out_dir / name).write_text(text)


if __name__ == "__main__":
    main()
