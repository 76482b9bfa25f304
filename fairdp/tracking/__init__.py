"""Experiment tracking: each stored config logged to a tracker (MLflow, W&B) as Ray Tune's logger
callbacks would, from what the store holds.

A ``Tracker`` is one module plus a registry entry (``register_tracker``); ``TrackingSync``
follows a run's store from the driver and logs every config whose rows are stored and that
the tracker does not hold yet, so tracking never delays a pack, a tracker that fails loses
no row, and the next run logs what a failed or killed one left out.
"""

from fairdp.tracking._base import (
    ConfigRecord,
    Tracker,
    TrackingSpec,
    get_tracker,
    parse_tracking,
    register_tracker,
    tracker_names,
)
from fairdp.tracking._mlflow import MLflowTracker
from fairdp.tracking._sync import TrackingSync, records_of_pack
from fairdp.tracking._wandb import WandbTracker

__all__ = ["ConfigRecord", "MLflowTracker", "Tracker", "TrackingSpec", "TrackingSync", "get_tracker",
           "parse_tracking", "records_of_pack", "register_tracker", "tracker_names", "WandbTracker"]
