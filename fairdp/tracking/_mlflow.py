"""MLflow: one MLflow run per stored config, through MLflow's own client (``MlflowClient``).

A run is named ``<method>/seed<seed>/<config_id>`` and tagged with the study, the results
location and the config's identity (``fairdp.*``), which is how a later run of the study
finds what is logged already. Params: the config's hyperparameters and how it trained;
metrics: its row's numbers (eps_formal, leakage, ...) and its per-epoch valid curves as
``history/valid_<curve>`` with the epoch as step.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

from fairdp.errors import InputError
from fairdp.tracking._base import ConfigRecord, Key, Tracker, finite, register_tracker

DEFAULT_URI = "sqlite:///mlflow.db"
BATCH = 1000  # MLflow's limit on metrics per log_batch (params: 100)
PARAMS_BATCH = 100


@register_tracker
class MLflowTracker(Tracker):
    name = "mlflow"
    options = ("uri", "experiment")

    def open(self) -> None:
        # an unreachable tracking server is retried for minutes by default; the driver must not hang
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise InputError("tracking.mlflow: the MLflow client is not installed; pip install 'fairdp[tracking]'") \
                from None
        self.uri = self.options_given.get("uri") or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
        experiment = self.options_given.get("experiment") or self.study
        # MLflow says at INFO that it creates its database tables: not the run's progress
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings():  # SQLAlchemy's deprecation notes about MLflow's own models
                warnings.simplefilter("ignore", DeprecationWarning)
                self.client = MlflowClient(tracking_uri=self.uri)
                found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        except Exception as e:  # noqa: BLE001 - any client error is the user's one line
            raise InputError(f"tracking.mlflow.uri: cannot use the MLflow store at {self.uri} "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None

    def where(self) -> str:
        return f"MLflow at {self.uri}"

    def logged(self) -> set[Key]:
        quoted = self.results.replace("\\", "\\\\").replace("'", "\\'")
        found, token = set(), None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`fairdp.results` = '{quoted}'",
                                           max_results=1000, page_token=token)
            for run in page:
                t = run.data.tags
                found.add((t["fairdp.method"], int(t["fairdp.seed"]), t["fairdp.config_id"]))
            token = page.token
            if not token:
                return found

    def log(self, record: ConfigRecord) -> None:
        from mlflow.entities import Metric, Param, RunTag

        tags = {"fairdp.study": record.study, "fairdp.results": self.results, "fairdp.dataset": record.dataset,
                "fairdp.method": record.method, "fairdp.seed": str(record.seed), "fairdp.config_id": record.config_id}
        if record.error:
            tags["fairdp.error"] = record.error[:5000]
        run = self.client.create_run(self.experiment_id, run_name=f"{record.method}/seed{record.seed}/{record.config_id}",
                                     tags=tags)
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in sorted(record.metrics.items()) if finite(v) is not None]
        for column in record.curves.columns:
            if column.startswith("valid_"):
                metrics += [Metric(f"history/{column}", float(v), now, int(e))
                            for e, v in zip(record.curves["epoch"], record.curves[column]) if finite(v) is not None]
        params = [Param(k, str(v)[:6000]) for k, v in sorted(record.params.items())]
        for i in range(0, max(len(metrics), len(params), 1), BATCH):
            self.client.log_batch(run.info.run_id, metrics=metrics[i:i + BATCH], params=[], tags=[])
        for i in range(0, len(params), PARAMS_BATCH):
            self.client.log_batch(run.info.run_id, params=params[i:i + PARAMS_BATCH])
        if "eps_formal" in record.metrics and finite(record.metrics["eps_formal"]) is None:
            self.client.log_batch(run.info.run_id, tags=[RunTag("fairdp.eps_formal", str(record.metrics["eps_formal"]))])
        self.client.set_terminated(run.info.run_id, "FINISHED" if record.status == "ok" else "FAILED")
