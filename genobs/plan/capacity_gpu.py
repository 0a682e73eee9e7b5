"""GPU signals from NVIDIA's dcgm-exporter (features.gpu_metrics): utilisation and
framebuffer per vLLM pod, the saturation alert and two memory-reservation checks.

DCGM runs in its own scrape job and labels each GPU with the workload pod the
kubelet allocated it to; vLLM's series carry the pod of their own target. Each
DCGM figure is therefore reduced per pod first and joined to the vLLM pods of the
spec (their `pod`, and `namespace` unless the spec turns it off), and only those
pairs are recorded: a fleet total of GPUs is never compared with a fleet total of
queues. Metric names come from genobs/data/dcgm.yaml."""

from __future__ import annotations

import functools

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import format_threshold, labels_template
from genobs.spec_capacity import Gpu
from genobs.units import parse_ratio


@functools.cache
def dcgm_data() -> dict:
    return data_files.load("dcgm.yaml")


def metric(key: str) -> str:
    return dcgm_data()["metrics"][key]["name"]


def settings(spec) -> Gpu | None:
    """features.gpu_metrics (the spec reads `dcgm` as the block with every default)."""
    return spec.features.gpu_metrics


def validate(spec, report) -> None:
    """report(path, message) for settings that leave no healthy framebuffer share."""
    gpu = settings(spec)
    if gpu is None:
        return
    floor = parse_ratio(gpu.memory_utilization) * parse_ratio(gpu.reservation_floor)
    if floor >= 1 - parse_ratio(gpu.min_free):
        report(
            ("features", "gpu_metrics", "min_free"),
            f"memory_utilization x reservation_floor ({floor:.0%}) must stay below 1 - min_free: "
            "no share of memory in use would be healthy",
        )


def join_labels(gpu: Gpu) -> tuple[str, ...]:
    """The labels a vLLM pod and its GPUs share once DCGM's labels are renamed to vLLM's."""
    return ("namespace", "pod") if gpu.namespace_label is not None else ("pod",)


def _renamed(sel: str, gpu: Gpu) -> str:
    """DCGM's workload labels under vLLM's names (exported_pod -> pod, ...)."""
    for theirs, ours in ((gpu.pod_label, "pod"), (gpu.namespace_label, "namespace")):
        if theirs is not None and theirs != ours:
            sel = f'label_replace({sel}, "{ours}", "$1", "{theirs}", "(.+)")'
    return sel


def _dcgm(key: str, gpu: Gpu) -> str:
    # GPUs not allocated to any pod carry an empty pod label: they belong to no replica
    matchers = (*((k, "=", v) for k, v in gpu.selector.items()), (gpu.pod_label, "!=", ""))
    return _renamed(q.selector(metric(key), matchers), gpu)


def _per_pod(b, gpu: Gpu, reduce: str, expr: str) -> str:
    """`reduce` of a per-GPU expression over each vLLM pod's GPUs, with the pod's vLLM labels."""
    ctx = b.ctx
    join = join_labels(gpu)
    labels = tuple(dict.fromkeys((*ctx.group, *join)))
    # one series per vLLM pod (and model) of the spec: the side that carries model_name and the selector
    owner = f"group {q.by(labels)} ({ctx.raw('requests_waiting')})"
    return f"{owner} * {q.on(join)} group_left () ({reduce} {q.by(join)} ({expr}))"


def build(b, gpu: Gpu) -> None:
    """Add the GPU recording rules and alerts to the capacity builder `b`."""
    ctx = b.ctx
    join = join_labels(gpu)
    labels = tuple(dict.fromkeys((*ctx.group, *join)))
    b.known.update(m["name"] for m in dcgm_data()["metrics"].values())
    used, free = _dcgm("fb_used", gpu), _dcgm("fb_free", gpu)
    share = f"{used} / ({used} + {free})"
    b.add("gpu_util_pod", naming.record("gpu_utilization_per_pod", "ratio_avg"), _per_pod(b, gpu, "avg", f"{_dcgm('gpu_util', gpu)} / 100"))
    b.add("gpu_fb_used_min_pod", naming.record("gpu_framebuffer_used_per_pod", "ratio_min"), _per_pod(b, gpu, "min", share))
    b.add("gpu_fb_used_max_pod", naming.record("gpu_framebuffer_used_per_pod", "ratio_max"), _per_pod(b, gpu, "max", share))
    b.add("waiting_pod", naming.record("requests_waiting_per_pod", "sum"), q.sum_by(labels, ctx.raw("requests_waiting")))
    # the fleet view, after pairing: mean utilisation of the model's pods
    b.add("gpu_util", naming.record("gpu_utilization", "ratio_avg"), f"avg {q.by(ctx.group)} ({b.ref('gpu_util_pod')})")
    pod_text = labels_template(labels)
    saturation = parse_ratio(gpu.saturation)
    util = b.ref("gpu_util_pod")
    b.alert(
        "GpuSaturated",
        f"{util} >= {saturation:g} and {b.ref('waiting_pod')} > {gpu.waiting_per_replica:g}",
        saturation,
        gpu.for_,
        util,
        "GPU utilisation per pod",
        texts={"waiting": f"{gpu.waiting_per_replica:g}"},
        label_text=pod_text,
    )
    reserved = parse_ratio(gpu.memory_utilization)
    floor = reserved * parse_ratio(gpu.reservation_floor)
    low = b.ref("gpu_fb_used_min_pod")
    b.alert(
        "GpuMemoryBelowReservation",
        f"{low} < {floor:g}",
        floor,
        gpu.memory_for,
        low,
        "GPU framebuffer used: emptiest GPU per pod",
        texts={"reserved": format_threshold("ratio", reserved)},
        label_text=pod_text,
    )
    min_free = parse_ratio(gpu.min_free)
    high = b.ref("gpu_fb_used_max_pod")
    b.alert(
        "GpuMemoryNearlyFull",
        f"{high} > {1 - min_free:g}",
        1 - min_free,
        gpu.memory_for,
        high,
        "GPU framebuffer used: fullest GPU per pod",
        texts={"free": format_threshold("ratio", min_free)},
        label_text=pod_text,
    )
