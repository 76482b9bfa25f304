"""Experiment tracking: each stored config logged to a tracker (MLflow, W&B) as Ray Tune's logger
callbacks would, from what the store holds.

A ``Tracker`` is one module plus a registry entry (``register_tracker``); ``TrackingSync``
follows a run's store from the driver and logs every config whose rows are stored and that
the tracker does not hold yet, so tracking never delays a pack, a tracker that fails loses
no row, and the next run logs what a failed or killed one left out.
"""

from fairdp.tracking import _mlflow, _wandb  # noqa: F401  (registers the trackers)

# No public Python names: a study's ``tracking:`` block chooses and configures the tracker
# (docs/study-spec.md#tracking).
__all__: list[str] = []
