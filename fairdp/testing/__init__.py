"""What a plugin author runs to check a method against fairdp's contract (``fairdp check-method``)."""
