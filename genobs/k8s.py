"""`render` stage, Kubernetes: rendered rules and dashboard as PrometheusRule, ConfigMap, Grafana provisioning."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from genobs.writer import FAST_SAFE_LOADER, dump_yaml

DASHBOARDS_ROOT = "/var/lib/grafana/dashboards"
MANAGED_BY = {"app.kubernetes.io/managed-by": "genobs"}


@dataclass(frozen=True)
class KubernetesOptions:
    namespace: str = "monitoring"
    labels: dict[str, str] = field(default_factory=dict)
    folder: str = "LLM serving"
    dashboards_root: str = DASHBOARDS_ROOT


def rule_groups(files: dict[str, bytes]) -> list[dict]:
    """The groups of every plain rule file (prometheus/*.rules.yaml), in file order; for a Thanos
    ruler (thanos/*.rules.yaml written) those, with their partial_response_strategy, which the
    operator's PrometheusRule carries for a ThanosRuler."""
    folder = "thanos/" if any(rel.startswith("thanos/") for rel in files) else "prometheus/"
    groups: list[dict] = []
    for rel, data in files.items():
        if rel.startswith(folder) and rel.count("/") == 1 and rel.endswith(".rules.yaml"):
            groups.extend(yaml.load(data, Loader=FAST_SAFE_LOADER)["groups"])  # noqa: S506
    return groups


def _dashboard(files: dict[str, bytes]) -> tuple[str, str]:
    found = [(rel, data) for rel, data in files.items() if rel.startswith("grafana/") and rel.endswith(".json")]
    if len(found) != 1:
        raise ValueError(f"expected one dashboard under grafana/, found {len(found)}")
    rel, data = found[0]
    return rel.removeprefix("grafana/"), data.decode("utf-8")


def _metadata(name: str, options: KubernetesOptions, extra: dict[str, str] | None = None) -> dict:
    labels = {**MANAGED_BY, **options.labels, **(extra or {})}
    return {"name": name, "namespace": options.namespace, "labels": dict(sorted(labels.items()))}


def kubernetes_files(name: str, files: dict[str, bytes], options: KubernetesOptions) -> dict[str, bytes]:
    """file name (under kubernetes/) -> bytes, from the files render_spec produced."""
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _metadata(f"genobs-{name}", options),
        "spec": {"groups": rule_groups(files)},
    }
    if not any(f.startswith("grafana/") for f in files):  # the edge tier: rules only
        return {"prometheusrule.yaml": dump_yaml(rule, name)}
    key, dashboard_json = _dashboard(files)
    metadata = _metadata(f"genobs-{name}-dashboard", options, {"grafana_dashboard": "1"})
    metadata["annotations"] = {"grafana_folder": options.folder}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {key: dashboard_json}}
    provisioning = {
        "apiVersion": 1,
        "providers": [
            {
                "name": f"genobs-{name}",
                "orgId": 1,
                "folder": options.folder,
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": f"{options.dashboards_root}/genobs-{name}", "foldersFromFilesStructure": False},
            }
        ],
    }
    return {
        "prometheusrule.yaml": dump_yaml(rule, name),
        "dashboard-configmap.yaml": dump_yaml(config_map, name),
        "grafana-provisioning.yaml": dump_yaml(provisioning, name),
    }
