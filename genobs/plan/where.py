"""Where a series comes from (part of the `plan` stage): the one definition of the labels that
say *where* — the spec's `group_by` (model and more), the labels the layer's selector fixes,
the cluster, the pool role of a disaggregated fleet, the replica (`instance`), the engine
(data-parallel rank) and the scheduler.

Every layer derives its grouping from a `Where`: the pods' recording rules and alerts, the
gateway (`at`: its own selector, the same model and cluster), an SLO over every cluster
(`overall`), liveness, capacity, inhibition's `equal`, confirm queries, dashboard variables and
the generated tests. A new dimension is a field here and a line in the label sets below that
keep it; no layer lists labels of its own."""

from __future__ import annotations

from dataclasses import dataclass, replace

INSTANCE = "instance"  # one scrape target: a replica's API server
MODEL = "model_name"  # the model label of every recorded series (a profile's own is copied to it)


def _unique(*labels: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(label for label in labels if label))


@dataclass(frozen=True)
class Where:
    """The labels a layer's series are grouped and fixed by: what every rule keeps."""

    group_by: tuple[str, ...]  # service.group_by: kept on every rule and alert, a dashboard variable each
    fixed: tuple[str, ...]  # the labels the layer's selector fixes (namespace, job, ...)
    cluster: str | None = None  # service.cluster_label: one backend holds several clusters
    role: str | None = None  # the pool label of a disaggregated fleet (service.roles.label)
    rank: str | None = None  # one engine (data-parallel rank) of a replica, where the release labels it
    schedulers: tuple[str, ...] = ()  # per-scheduler labels besides the rank (SGLang dp_rank)

    # --- the layers' label sets ---------------------------------------------------------------
    @property
    def group(self) -> tuple[str, ...]:
        """What every recorded series and alert of a model keeps: group_by, the selector's labels,
        the cluster."""
        return _unique(*self.group_by, *self.fixed, self.cluster)

    @property
    def variables(self) -> tuple[str, ...]:
        """The dashboard's own variables: the spec's group_by and the cluster."""
        return _unique(*self.group_by, self.cluster)

    @property
    def process(self) -> tuple[str, ...]:
        """One API-server process (process metrics, HTTP answers carry no model): the grouping
        without the model, per scrape target."""
        return _unique(*(label for label in self.group if label != MODEL), INSTANCE)

    @property
    def targets(self) -> tuple[str, ...]:
        """A scrape job's targets taken together: the process labels without `instance`."""
        return tuple(label for label in self.process if label != INSTANCE)

    @property
    def target(self) -> tuple[str, ...]:
        """One scrape target: `instance`, within its cluster when several share a backend."""
        return _unique(self.cluster, INSTANCE)

    @property
    def replica(self) -> tuple[str, ...]:
        """One replica of a model: the grouping plus its scrape target."""
        return _unique(*self.group, INSTANCE)

    @property
    def engine(self) -> tuple[str, ...]:
        """One engine of a replica: its own KV pool and scheduler queue."""
        return _unique(*self.replica, self.rank)

    @property
    def scheduler(self) -> tuple[str, ...]:
        """One scheduler of a replica, on the gauges that carry its labels."""
        return _unique(*self.engine, *self.schedulers)

    @property
    def engine_of_target(self) -> tuple[str, ...]:
        """One engine of a scrape target, whatever model it serves (series without the model)."""
        return _unique(*self.target, self.rank)

    @property
    def peers(self) -> tuple[str, ...]:
        """Replicas that are each other's peers: the grouping, and the pool where there are pools."""
        return _unique(*self.group, self.role)

    @property
    def pool(self) -> tuple[str, ...]:
        """The role label of a disaggregated fleet's pools, or nothing."""
        return _unique(self.role)

    @property
    def capacity(self) -> tuple[str, ...]:
        """Targets judged together for lost capacity: the job's, per pool on a P/D fleet."""
        return _unique(*self.targets, self.role)

    @property
    def drilldown(self) -> tuple[str, ...]:
        """The dashboard's drill-down chain below the spec's variables: role, instance, rank."""
        return _unique(self.role, INSTANCE, self.rank)

    # --- other layers ----------------------------------------------------------------------------
    def overall(self) -> Where:
        """The same grouping over every cluster together (an SLO of `scope: global`)."""
        return replace(self, cluster=None)

    def at(self, fixed: tuple[str, ...]) -> Where:
        """Another layer in front of the same models, scraped under its own selector (a gateway):
        the spec's grouping and cluster, no pods' role, replica or rank (one gateway target
        serves every replica)."""
        return Where(
            group_by=tuple(label for label in self.group_by if label != INSTANCE),
            fixed=fixed,
            cluster=self.cluster,
        )
